"""Hugging Face ``datasets`` loading from files the tests write (jsonl, parquet, csv, tsv)
and from a local dataset folder; hub names must come from the cache, never the network."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from evalq.core.errors import InputError
from evalq.data.hf import HFSpec, load_hf


@pytest.fixture(autouse=True)
def _isolated_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))


def write_files(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    rows = [{"doc": 1, "heading": "One", "body": "the first text"},
            {"doc": "0002", "heading": None, "body": "the second text"}]
    (root / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(pa.table({"qid": ["a", "b"], "question": ["first?", "second?"]}),
                   root / "queries.parquet")
    (root / "qrels.csv").write_text("query-id,corpus-id,score\na,1,1\nb,0002,2\n")
    return root


COLUMNS = {"doc_id": "doc", "title": "heading", "text": "body",
           "query_id": "qid", "query_text": "question"}


def spec(**overrides: object) -> HFSpec:
    data: dict[str, object] = {
        "corpus": {"files": "corpus.jsonl"},
        "queries": {"files": "queries.parquet"},
        "qrels": {"files": "qrels.csv"},
        "columns": COLUMNS,
    }
    data.update(overrides)
    return HFSpec.model_validate(data)


def test_jsonl_parquet_csv_with_custom_columns(tmp_path: Path) -> None:
    root = write_files(tmp_path / "data")
    ds = load_hf(spec(), base_dir=root, name="mine")
    assert ds.corpus.ids == ("1", "0002")  # CSV "0002" stays a string id
    assert ds.corpus.titles == ("One", "")
    assert ds.queries.ids == ("a", "b")
    assert ds.qrels.judgments == {"a": {"1": 1}, "b": {"0002": 2}}
    assert ds.source["source"] == "hf" and ds.source["titles"] is True


def test_tsv_and_parquet_qrels_agree(tmp_path: Path) -> None:
    root = write_files(tmp_path / "data")
    (root / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\na\t1\t1\nb\t0002\t2\n")
    pq.write_table(pa.table({"query-id": ["a", "b"], "corpus-id": ["1", "0002"],
                             "score": [1, 2]}), root / "qrels.parquet")
    fingerprints = {
        load_hf(spec(qrels={"files": name}), base_dir=root).fingerprint
        for name in ("qrels.csv", "qrels.tsv", "qrels.parquet")
    }
    assert len(fingerprints) == 1


def test_local_dataset_folder_by_name(tmp_path: Path) -> None:
    root = write_files(tmp_path / "data")
    folder = root / "corpus_folder"
    folder.mkdir()
    pq.write_table(pa.table({"doc": ["1", "0002"], "body": ["x one", "x two"]}),
                   folder / "train.parquet")
    columns = {k: v for k, v in COLUMNS.items() if k != "title"}
    ds = load_hf(spec(corpus={"name": "corpus_folder"}, columns=columns), base_dir=root)
    assert ds.corpus.texts == ("x one", "x two")
    assert ds.source["titles"] is False  # the default title column is optional...


def test_explicit_title_column_must_exist(tmp_path: Path) -> None:
    root = write_files(tmp_path / "data")
    columns = dict(COLUMNS, title="missing")
    with pytest.raises(InputError) as info:
        load_hf(spec(columns=columns), base_dir=root)
    assert info.value.field == "columns.title" and "heading" in str(info.value)


def test_missing_text_column_names_the_field(tmp_path: Path) -> None:
    root = write_files(tmp_path / "data")
    with pytest.raises(InputError) as info:
        load_hf(spec(columns=dict(COLUMNS, query_text="nope")), base_dir=root)
    assert info.value.field == "columns.query_text" and "queries.parquet" in str(info.value)


def test_hub_name_not_cached_says_so(tmp_path: Path) -> None:
    root = write_files(tmp_path / "data")
    with pytest.raises(InputError) as info:
        load_hf(spec(corpus={"name": "evalq-test/not-a-dataset", "config": "corpus"}),
                base_dir=root)
    message = str(info.value)
    assert "not in the local Hugging Face cache" in message and "Fix:" in message
    assert info.value.field == "corpus.name"


def test_missing_files_and_bad_rows(tmp_path: Path) -> None:
    root = write_files(tmp_path / "data")
    with pytest.raises(InputError) as info:
        load_hf(spec(queries={"files": "absent-*.jsonl"}), base_dir=root)
    assert info.value.field == "queries.files"
    (root / "qrels.csv").write_text("query-id,corpus-id,score\na,1,1\nb,0002,maybe\n")
    with pytest.raises(InputError) as info:
        load_hf(spec(), base_dir=root)
    assert (info.value.line, info.value.field) == (2, "score")
    assert "qrels.csv" in str(info.value.file)


def test_duplicate_ids_and_empty_texts_use_shared_checks(tmp_path: Path) -> None:
    root = write_files(tmp_path / "data")
    pq.write_table(pa.table({"qid": ["a", "a"], "question": ["x", "y"]}),
                   root / "queries.parquet")
    with pytest.raises(InputError) as info:
        load_hf(spec(), base_dir=root)
    assert info.value.line == 2 and "duplicate query id" in str(info.value)
    pq.write_table(pa.table({"qid": ["a", "b"], "question": ["", "y"]}),
                   root / "queries.parquet")
    with pytest.raises(InputError, match="1 of 2 query texts are empty"):
        load_hf(spec(), base_dir=root)


def test_spec_needs_exactly_one_of_files_or_name() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        spec(corpus={"files": "a.jsonl", "name": "x"})


def test_json_ids_mixing_numbers_and_strings_stay_exact(tmp_path: Path) -> None:
    # Arrow's inference would store these as JSON text ('"d1"'); evalq reads JSON itself.
    root = write_files(tmp_path / "data")
    (root / "corpus.jsonl").write_text('{"doc": "d1", "body": "x"}\n\n{"doc": 7, "body": "y"}\n')
    (root / "qrels.csv").write_text("query-id,corpus-id,score\na,d1,1\nb,7,1\n")
    columns = {k: v for k, v in COLUMNS.items() if k != "title"}
    ds = load_hf(spec(columns=columns), base_dir=root)
    assert ds.corpus.ids == ("d1", "7")
    assert ds.source["unknown_qrels_documents"] == 0


def test_json_errors_carry_real_line_numbers(tmp_path: Path) -> None:
    root = write_files(tmp_path / "data")
    (root / "corpus.jsonl").write_text('{"doc": "d1", "body": "x"}\n\n{"doc": "d2", "body": 3}\n')
    columns = {k: v for k, v in COLUMNS.items() if k != "title"}
    with pytest.raises(InputError) as info:
        load_hf(spec(columns=columns), base_dir=root)
    assert (Path(info.value.file).name, info.value.line, info.value.field) == (
        "corpus.jsonl", 3, "body")
    (root / "corpus.jsonl").write_text('{"doc": "d1", "body": "x"}\n{"doc": \n')
    with pytest.raises(InputError, match="malformed JSON") as info:
        load_hf(spec(), base_dir=root)
    assert info.value.line == 2


def test_ids_with_whitespace_are_refused_while_reading_like_beir(tmp_path: Path) -> None:
    # One id check for every reader: a space in an id would otherwise pass the Hugging Face
    # reader and fail only when the run file is written, after every document is encoded.
    root = write_files(tmp_path / "data")
    pq.write_table(pa.table({"qid": ["a", "b c"], "question": ["x", "y"]}),
                   root / "queries.parquet")
    with pytest.raises(InputError) as info:
        load_hf(spec(), base_dir=root)
    assert "contains whitespace" in str(info.value)
    assert (Path(info.value.file).name, info.value.line, info.value.field) == (
        "queries.parquet", 2, "qid")
