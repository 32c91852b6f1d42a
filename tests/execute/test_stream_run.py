"""`evalq run` on a streamed corpus (``stream:`` in a dataset spec) against the loaded one.

The same files are read two ways: loaded whole, and streamed in blocks of 40 rows into
shards of 70 vectors. The dataset must be the same (fingerprint, ids, slice), and a run
must give the same metrics for batch-invariant variants (float32: vectors agree to float
noise, since batches are packed within a block); a rerun must re-encode nothing.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalq.app.api import run_recipe_file
from evalq.app.cli import main
from evalq.core.errors import InputError
from evalq.data.manifest import load_dataset
from evalq.data.streamed import StreamedCorpus, is_streamed
from evalq.results.folder import RunFolder
from support import recipes
from support.trec_files import write_trec_copy

STREAM = {"block_rows": 40, "shard_rows": 70}



@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A TREC-style copy of a pydocs slice: corpus.jsonl, queries.jsonl, qrels.tsv."""
    ds = load_dataset("pydocs", max_queries=30, max_docs=150)
    return write_trec_copy(ds, tmp_path_factory.mktemp("streamdata"))


def _spec(data: Path, stream: bool, corpus: str = "corpus.jsonl") -> dict[str, Any]:
    spec: dict[str, Any] = {"name": "sd", "source": "trec", "trec": {
        "corpus": str(data / corpus), "queries": str(data / "queries.jsonl"),
        "qrels": str(data / "qrels.tsv")}}
    return {**spec, "stream": STREAM} if stream else spec


@pytest.mark.parametrize("limits", [(None, None), (12, 60), (None, 20)])
def test_streamed_dataset_is_the_loaded_dataset(data: Path, limits: tuple[Any, Any]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (None, 20) drops relevant judgments, and says so
        loaded = load_dataset(_spec(data, False), max_queries=limits[0], max_docs=limits[1])
        streamed = load_dataset(_spec(data, True), max_queries=limits[0], max_docs=limits[1])
    assert is_streamed(streamed) and not is_streamed(loaded)
    assert isinstance(streamed.corpus, StreamedCorpus)
    assert streamed.fingerprint == loaded.fingerprint
    assert streamed.corpus.ids == loaded.corpus.ids
    assert (streamed.queries, streamed.qrels) == (loaded.queries, loaded.qrels)
    assert list(streamed.corpus.encoding_pairs()) == list(loaded.corpus.encoding_pairs())
    blocks = list(streamed.corpus.blocks())
    assert all(len(b.ids) == STREAM["block_rows"] for b in blocks[:-1])
    assert [i for b in blocks for i in b.ids] == list(loaded.corpus.ids)
    assert streamed.source.get("slice") == loaded.source.get("slice")


def test_a_parquet_corpus_streams_to_the_same_fingerprint(data: Path, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [json.loads(line) for line in (data / "corpus.jsonl").read_text().splitlines()]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "corpus.parquet", row_group_size=33)
    spec = _spec(data, True)
    spec["trec"]["corpus"] = str(tmp_path / "corpus.parquet")
    assert load_dataset(spec).fingerprint == load_dataset(_spec(data, False)).fingerprint


def test_streamed_corpus_errors_name_file_line_and_field(data: Path, tmp_path: Path) -> None:
    lines = (data / "corpus.jsonl").read_text().splitlines()
    dup = tmp_path / "dup.jsonl"
    dup.write_text("\n".join([*lines, lines[3]]) + "\n")
    spec = _spec(data, True)
    spec["trec"]["corpus"] = str(dup)
    with pytest.raises(InputError) as err:
        load_dataset(spec)
    assert err.value.file == str(dup) and err.value.line == len(lines) + 1
    assert "duplicate document id" in str(err.value) and "line 4" in str(err.value)

    with pytest.raises(InputError) as err:  # stream: applies to files only
        load_dataset({"name": "p", "source": "pydocs", "stream": STREAM})
    assert err.value.field == "stream"

    moving = tmp_path / "moving.jsonl"  # the file changes between two reads
    moving.write_text("\n".join(lines) + "\n")
    spec["trec"]["corpus"] = str(moving)
    ds = load_dataset(spec)
    row = json.loads(lines[50])
    row["_id"] = "renamed"
    moving.write_text("\n".join([*lines[:50], json.dumps(row), *lines[51:]]) + "\n")
    with pytest.raises(InputError) as err:
        list(ds.corpus.blocks())
    assert err.value.file == moving and err.value.line == 51
    assert "changed" in str(err.value)


def _recipe(folder: Path, data: Path, name: str, stream: bool, cache: Path,
            extra: dict[str, Any] | None = None) -> Path:
    """``extra``: one more candidate, after trunc32."""
    candidates = [{"name": "trunc32", "encoding": {"max_length": 32}}]
    return recipes.write(folder / f"{name}.yaml", recipes.recipe(
        name, cache=cache, datasets=[_spec(data, stream)], cache_chunk=32,
        candidates=candidates + ([extra] if extra else []),
        metrics=["nDCG@10", "R@100", "RR@10"],
        reference_metrics=["overlap@10", "refnDCG@10", "RBO@100", "cosine"],
        gates=[recipes.gate("nDCG@10", "qrels", max_drop="50%")], resamples=500))


@pytest.fixture(scope="module")
def runs(data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("streamruns")
    out: dict[str, Any] = {"base": base}
    for name, stream in (("loaded", False), ("streamed", True)):
        recipe = _recipe(base, data, name, stream, base / f"cache-{name}")
        out[name] = run_recipe_file(recipe, output=base / name, progress=False)
    # A second streamed run on the same cache: every block's chunks are there.
    out["rerun"] = run_recipe_file(_recipe(base, data, "streamed", True,
                                           base / "cache-streamed"),
                                   output=base / "rerun", progress=False)
    return out


def _per_query(folder: Path, variant: str) -> dict[str, Any]:
    values = RunFolder(folder).read_per_query("sd", variant)
    return {"query_ids": list(values.query_ids),
            "values": {k: np.asarray(v).tolist() for k, v in values.values.items()}}


def _run_lines(folder: Path, variant: str) -> list[list[str]]:
    return [line.split() for line in
            (folder / "runs" / "sd" / f"{variant}.trec").read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.model
def test_streamed_run_gives_the_loaded_runs_metrics(runs: dict[str, Any]) -> None:
    loaded, streamed = runs["loaded"], runs["streamed"]
    for variant in ("fp32", "trunc32"):
        a = _run_lines(loaded.output, variant)
        b = _run_lines(streamed.output, variant)
        assert [row[:4] for row in a] == [row[:4] for row in b]  # same documents, same ranks
        np.testing.assert_allclose([float(r[4]) for r in a], [float(r[4]) for r in b],
                                   rtol=0, atol=1e-6)
        pa, pb = _per_query(loaded.output, variant), _per_query(streamed.output, variant)
        assert pa["query_ids"] == pb["query_ids"]
        assert set(pa["values"]) == set(pb["values"])
        for measure, values in pa["values"].items():
            np.testing.assert_allclose(values, pb["values"][measure], rtol=0, atol=1e-6,
                                       err_msg=f"{variant} {measure}")
    la = loaded.summary["datasets"]["sd"]["variants"]["trunc32"]
    sa = streamed.summary["datasets"]["sd"]["variants"]["trunc32"]
    assert la["metrics"]["nDCG@10"]["value"] == pytest.approx(sa["metrics"]["nDCG@10"]["value"],
                                                              abs=1e-12)
    assert la["vectors"]["document"]["mean"] == pytest.approx(sa["vectors"]["document"]["mean"],
                                                              abs=1e-6)
    cosines = [json.loads((r.output / "per_text" / "sd" / "trunc32.json").read_text())
               for r in (loaded, streamed)]
    assert cosines[0]["document"].keys() == cosines[1]["document"].keys()
    np.testing.assert_allclose(list(cosines[0]["document"].values()),
                               list(cosines[1]["document"].values()), rtol=0, atol=1e-6)


@pytest.mark.slow
@pytest.mark.model
def test_streamed_run_records_its_shards_and_cleans_them_up(runs: dict[str, Any]) -> None:
    streamed = runs["streamed"]
    manifest = json.loads((streamed.output / "manifest.json").read_text())
    loaded = json.loads((runs["loaded"].output / "manifest.json").read_text())
    assert manifest["datasets"]["sd"]["fingerprint"] == loaded["datasets"]["sd"]["fingerprint"]
    assert manifest["datasets"]["sd"]["source"]["stream"] == STREAM
    entry = manifest["variants"]["fp32"]["datasets"]["sd"]
    assert entry["stream"] == {"blocks": 4, "shards": 3, "shard_rows": 70}  # 150 documents
    assert entry["index"]["bytes"] == 150 * 384 * 4
    assert entry["encode"]["documents"]["texts"] == 150
    assert not (streamed.output / "shards").exists()  # the cache holds the same vectors
    texts = json.loads((streamed.output / "texts" / "sd.json").read_text())
    assert texts == json.loads((runs["loaded"].output / "texts" / "sd.json").read_text())


@pytest.mark.slow
@pytest.mark.model
def test_streamed_rerun_encodes_nothing_and_reproduces(runs: dict[str, Any]) -> None:
    manifest = json.loads((runs["rerun"].output / "manifest.json").read_text())
    for variant in ("fp32", "trunc32"):
        docs = manifest["variants"][variant]["datasets"]["sd"]["encode"]["documents"]
        assert docs["n_computed"] == 0 and docs["chunks_computed"] == 0
        assert docs["n_cached"] == 150
        assert _per_query(runs["rerun"].output, variant) == \
            _per_query(runs["streamed"].output, variant)


@pytest.mark.parametrize("extra, field", [
    ({"name": "i8", "vectors": {"quantize": "int8"}}, "candidates.1.vectors.quantize"),
    ({"name": "hnsw", "index": {"factory": "HNSW32"}}, "candidates.1.index"),
], ids=["vectors", "index"])
def test_whole_corpus_features_on_a_streamed_corpus_exit_2(
        data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        extra: dict[str, Any], field: str) -> None:
    recipe = _recipe(tmp_path, data, "refused", True, tmp_path / "cache", extra)
    assert main(["validate", str(recipe)]) == 2  # the plan sees it, nothing loads
    assert field in capsys.readouterr().err
    assert main(["run", str(recipe), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert field in err and "stream" in err and f"{recipe}:" in err  # file:line
    assert not (tmp_path / "cache" / "embeddings").exists()  # refused before any encoding
