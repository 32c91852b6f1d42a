"""Streaming corpus readers and the sharded on-disk vector store."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evalq.core.errors import InputError
from evalq.data.streamed import StreamOptions, stream_file
from evalq.data.streaming import iter_blocks
from evalq.data.vectors import ShardWriter, open_shards
from evalq.execute.streamed import encode_corpus
from evalq.retrieve.search import search
from evalq.retrieve.shards import search_shards

ROWS = [{"_id": f"d{i}", "title": "T" if i % 3 == 0 else "", "text": f"text number {i}"}
        for i in range(23)]


def _expected() -> list[str]:
    return [f"{r['title']} {r['text']}" if r["title"] else r["text"] for r in ROWS]


def _check(blocks) -> None:
    blocks = list(blocks)
    assert [len(b.ids) for b in blocks] == [10, 10, 3]
    assert [i for b in blocks for i in b.ids] == [r["_id"] for r in ROWS]
    assert [t for b in blocks for t in b.texts] == _expected()


def test_jsonl_parquet_and_arrow_stream_the_same_blocks(tmp_path: Path) -> None:
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    _check(iter_blocks(jsonl, block_rows=10))
    table = pa.Table.from_pylist(ROWS)
    pq.write_table(table, tmp_path / "c.parquet", row_group_size=7)
    _check(iter_blocks(tmp_path / "c.parquet", block_rows=10))
    datasets.Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "hf"))
    _check(iter_blocks(tmp_path / "hf", block_rows=10))


def test_bad_rows_and_formats_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "c.jsonl"
    bad.write_text('{"_id": "a", "text": "x"}\n{"_id": "b"}\n', encoding="utf-8")
    with pytest.raises(InputError) as err:
        list(iter_blocks(bad))
    assert err.value.field == "text" and err.value.file == bad
    csv = tmp_path / "c.csv"
    csv.write_text("_id,text\na,x\n", encoding="utf-8")
    with pytest.raises(InputError) as err:
        list(iter_blocks(csv))
    assert "cannot stream a corpus from '.csv'" in err.value.message


@pytest.mark.parametrize("name", ["gone.jsonl", "gone.parquet", "gone.arrow",
                                  "broken.parquet", "broken.arrow", "empty-folder"])
def test_missing_or_unreadable_corpus_is_an_input_error(tmp_path: Path, name: str) -> None:
    """Exit 2 naming the file, not a pyarrow or datasets traceback (exit 3)."""
    path = tmp_path / name
    if name.startswith("broken"):
        path.write_text("not a columnar file\n", encoding="utf-8")
    elif name == "empty-folder":
        path.mkdir()
    with pytest.raises(InputError) as err:
        list(iter_blocks(path))
    assert err.value.file == path
    expected = "corpus file not found" if name.startswith("gone") else "cannot read the corpus"
    assert err.value.message.startswith(expected)


def test_shard_writer_round_trip_and_search(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    docs = rng.standard_normal((1000, 24)).astype(np.float32)
    writer = ShardWriter(tmp_path / "v", shard_rows=300)
    for start in range(0, 1000, 137):  # blocks that straddle shard boundaries
        writer.append(docs[start : start + 137])
    layout = writer.close()
    assert layout.rows == (300, 300, 300, 100)
    layout, shards = open_shards(tmp_path / "v")
    assert all(isinstance(s, np.memmap) for s in shards)
    np.testing.assert_array_equal(np.concatenate(shards), docs)
    ids = [f"d{i}" for i in range(1000)]
    q = rng.standard_normal((7, 24)).astype(np.float32)
    a = search_shards(q, shards, ids, [str(i) for i in range(7)], depth=50)
    b = search(q, docs, ids, [str(i) for i in range(7)], depth=50)
    np.testing.assert_array_equal(a.indices, b.indices)


@pytest.mark.model
def test_encode_corpus_matches_encoding_in_one_go(tmp_path: Path, minilm_path) -> None:
    from evalq.encode.batching import encode_texts
    from evalq.engines.inprocess import InProcessEncoder
    from evalq.engines.modelinfo import default_settings

    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in ROWS) + "\n", encoding="utf-8")
    encoder = InProcessEncoder(minilm_path, settings=default_settings(minilm_path))
    try:
        streamed = stream_file(jsonl, StreamOptions(block_rows=10, shard_rows=8))
        written = encode_corpus(encoder, streamed, tmp_path / "v", title_separator=" ",
                                options={}, progress=False)
        whole = encode_texts(encoder, _expected(), role="document", progress=False).vectors
    finally:
        encoder.close()
    assert streamed.ids == tuple(r["_id"] for r in ROWS)
    assert (written.blocks, written.shards) == (3, 3)
    _, shards = open_shards(tmp_path / "v")
    np.testing.assert_allclose(np.concatenate(shards), whole, atol=1e-5)


def test_searched_shards_leave_the_resident_set(tmp_path: Path) -> None:
    """Mapped shard pages count in RSS once read and stay there until the kernel needs
    them: without release_pages a search's RSS grows by every vector it read (measured:
    +57 MiB for 39 MiB of vectors). After the search the pages are gone from this
    process and the data reads back the same."""
    import psutil

    from evalq.data.vectors import release_pages

    rng = np.random.default_rng(11)
    docs = rng.standard_normal((16_000, 256)).astype(np.float32)  # 15.6 MiB in 4 shards
    writer = ShardWriter(tmp_path / "v", shard_rows=4_000)
    writer.append(docs)
    writer.close()
    _, shards = open_shards(tmp_path / "v")
    ids = [f"d{i:05d}" for i in range(len(docs))]
    q = rng.standard_normal((3, 256)).astype(np.float32)
    me = psutil.Process()
    mib = 1 << 20

    touched = me.memory_info().rss
    checksum = float(np.asarray(shards[0], dtype=np.float64).sum())  # reads every page
    read = me.memory_info().rss - touched
    assert read > 3 * mib  # the 3.9 MiB shard is now resident
    assert release_pages(shards[0]) is True
    assert me.memory_info().rss < touched + read - 3 * mib
    assert float(np.asarray(shards[0], dtype=np.float64).sum()) == checksum
    release_pages(shards[0])
    assert release_pages(docs) is False  # an in-memory array: nothing to release

    search_shards(q, [docs[:100]], ids[:100], ["a", "b", "c"], depth=10)  # loads faiss
    before = me.memory_info().rss
    got = search_shards(q, shards, ids, ["a", "b", "c"], depth=10)
    assert me.memory_info().rss - before < 8 * mib  # not the 15.6 MiB of vectors read
    flat = search(q, docs, ids, ["a", "b", "c"], depth=10)
    np.testing.assert_array_equal(got.indices, flat.indices)
