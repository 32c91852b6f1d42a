"""BEIR folders: loading, string ids, and every content error with file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalq.core.errors import InputError
from evalq.data.assemble import DatasetWarning
from evalq.data.beir import load_beir

DOCS = [
    {"_id": "d1", "title": "Alpha", "text": "first document"},
    {"_id": 2, "title": "", "text": "second document"},
    {"_id": "0003", "text": "third document, no title field"},
]
QUERIES = [
    {"_id": "q1", "text": "find the first"},
    {"_id": 7, "text": "find the second"},
    {"_id": "q3", "text": "only judged in train"},
]
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\n7\t2\t2\n7\t0003\t0\n"


def jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def make_beir(
    root: Path,
    docs: str | bytes | None = None,
    queries: str | None = None,
    qrels: str | None = None,
    split: str = "test",
) -> Path:
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    corpus = docs if docs is not None else jsonl(DOCS)
    (root / "corpus.jsonl").write_bytes(corpus if isinstance(corpus, bytes) else corpus.encode())
    (root / "queries.jsonl").write_text(queries if queries is not None else jsonl(QUERIES))
    (root / "qrels" / f"{split}.tsv").write_text(qrels if qrels is not None else QRELS)
    return root


def test_loads_with_string_ids_and_judged_queries_only(tmp_path: Path) -> None:
    ds = load_beir(make_beir(tmp_path / "set"))
    assert ds.name == "set"
    assert ds.corpus.ids == ("d1", "2", "0003")
    assert ds.corpus.titles == ("Alpha", "", "")
    assert ds.queries.ids == ("q1", "7")  # q3 has no judgment in this split
    assert ds.qrels.judgments == {"q1": {"d1": 1}, "7": {"2": 2, "0003": 0}}
    assert ds.source["queries_without_judgments"] == 1
    assert ds.corpus.texts_for_encoding() == ["Alpha first document", "second document",
                                              "third document, no title field"]
    assert ds.fingerprint.startswith("sha256:") and len(ds.fingerprint) == 71


def test_use_titles_false_and_keep_unjudged(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "set")
    ds = load_beir(root, use_titles=False, keep_unjudged_queries=True)
    assert ds.corpus.titles == ("", "", "")
    assert ds.queries.ids == ("q1", "7", "q3")
    assert ds.fingerprint != load_beir(root).fingerprint


def test_fingerprint_is_stable_and_sensitive(tmp_path: Path) -> None:
    a = load_beir(make_beir(tmp_path / "a"))
    b = load_beir(make_beir(tmp_path / "b"))
    assert a.fingerprint == b.fingerprint
    changed = [*DOCS[:2], {"_id": "0003", "text": "third document, no title field!"}]
    c = load_beir(make_beir(tmp_path / "c", docs=jsonl(changed)))
    assert c.fingerprint != a.fingerprint


def test_missing_files_are_listed(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "set")
    (root / "queries.jsonl").unlink()
    with pytest.raises(InputError) as info:
        load_beir(root)
    assert "queries.jsonl" in str(info.value) and "corpus.jsonl" in str(info.value)
    with pytest.raises(InputError, match="not found"):
        load_beir(tmp_path / "nowhere")


def test_missing_split_lists_available_splits(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "set", split="dev")
    with pytest.raises(InputError) as info:
        load_beir(root, split="test")
    assert info.value.field == "split" and "dev" in str(info.value)


@pytest.mark.parametrize(
    ("corpus", "line", "field", "needle"),
    [
        (jsonl(DOCS[:1]) + '{"_id": "x", "text": \n', 2, None, "malformed JSON"),
        (jsonl(DOCS[:1]) + "[1, 2]\n", 2, None, "JSON object"),
        (jsonl(DOCS[:1]) + '{"_id": "x"}\n', 2, "text", "missing field"),
        (jsonl(DOCS[:1]) + '{"text": "no id"}\n', 2, "_id", "missing field"),
        (jsonl(DOCS[:1]) + '{"_id": true, "text": "t"}\n', 2, "_id", "id must be"),
        (jsonl(DOCS[:1]) + '{"_id": "x", "text": 5}\n', 2, "text", "expected a string"),
        (jsonl(DOCS) + '\n{"_id": "d1", "text": "again"}\n', 5, "_id", "duplicate document id"),
    ],
)
def test_corpus_errors_name_file_line_field(
    tmp_path: Path, corpus: str, line: int, field: str | None, needle: str
) -> None:
    root = make_beir(tmp_path / "set", docs=corpus)
    with pytest.raises(InputError) as info:
        load_beir(root)
    error = info.value
    assert Path(error.file) == root / "corpus.jsonl"
    assert (error.line, error.field) == (line, field)
    assert needle in str(error) and f"corpus.jsonl:{line}" in str(error)


def test_duplicate_query_id_names_both_lines(tmp_path: Path) -> None:
    queries = jsonl(QUERIES) + '{"_id": "q1", "text": "dup"}\n'
    with pytest.raises(InputError) as info:
        load_beir(make_beir(tmp_path / "set", queries=queries))
    assert info.value.line == 4 and "line 1" in str(info.value)


def test_non_utf8_corpus_reports_line(tmp_path: Path) -> None:
    corpus = jsonl(DOCS).encode() + b'{"_id": "x", "text": "caf\xe9"}\n'
    with pytest.raises(InputError) as info:
        load_beir(make_beir(tmp_path / "set", docs=corpus))
    assert info.value.line == 4 and "UTF-8" in str(info.value)


def test_empty_texts_are_counted_and_refused(tmp_path: Path) -> None:
    docs = [*DOCS, {"_id": "e1", "title": "", "text": "  "}, {"_id": "e2", "text": None}]
    root = make_beir(tmp_path / "set", docs=jsonl(docs))
    with pytest.raises(InputError) as info:
        load_beir(root)
    assert "2 of 5 document texts are empty" in str(info.value)
    assert (info.value.line, info.value.field) == (4, "text")
    assert "allow_empty_texts" in str(info.value)


def test_empty_texts_allowed_are_kept_and_reported(tmp_path: Path) -> None:
    docs = [*DOCS, {"_id": "e1", "title": "", "text": ""}]
    root = make_beir(tmp_path / "set", docs=jsonl(docs))
    with pytest.warns(DatasetWarning, match="1 of 4 document texts are empty"):
        ds = load_beir(root, allow_empty_texts=True)
    assert "e1" in ds.corpus.ids and ds.source["empty_documents"] == 1
    assert ds.source["warnings"]


def test_title_only_document_is_not_empty(tmp_path: Path) -> None:
    docs = [*DOCS, {"_id": "t1", "title": "Just a title", "text": ""}]
    ds = load_beir(make_beir(tmp_path / "set", docs=jsonl(docs)))
    assert ds.source["empty_documents"] == 0


def test_empty_query_text_is_refused(tmp_path: Path) -> None:
    queries = jsonl([{"_id": "q1", "text": " "}, QUERIES[1]])
    with pytest.raises(InputError) as info:
        load_beir(make_beir(tmp_path / "set", queries=queries))
    assert "1 of 2 query texts are empty" in str(info.value)
    assert Path(info.value.file).name == "queries.jsonl"


def test_unknown_ids_in_qrels_warn_with_counts(tmp_path: Path) -> None:
    qrels = QRELS + "ghost\td1\t1\nq1\tmissing-a\t1\nq1\tmissing-b\t0\n7\tmissing-a\t1\n"
    root = make_beir(tmp_path / "set", qrels=qrels)
    with pytest.warns(DatasetWarning) as record:
        ds = load_beir(root)
    messages = " ".join(str(w.message) for w in record)
    assert "1 judged queries are not in the queries file" in messages
    assert "3 judgments name 2 documents that are not in the corpus" in messages
    # unknown query dropped (it can never be run); unknown documents kept (trec_eval does)
    assert "ghost" not in ds.qrels.judgments
    assert ds.qrels.judgments["q1"] == {"d1": 1, "missing-a": 1, "missing-b": 0}
    assert ds.source["unknown_qrels_queries"] == 1
    assert ds.source["unknown_qrels_documents"] == 2


def test_qrels_naming_no_known_query_is_an_error(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "set", qrels="query-id\tcorpus-id\tscore\nzz\td1\t1\n")
    with pytest.raises(InputError, match="no judged query"), pytest.warns(DatasetWarning):
        load_beir(root)


def test_trec_format_qrels_in_a_beir_folder(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "set", qrels="q1 0 d1 1\n")
    assert load_beir(root).qrels.judgments == {"q1": {"d1": 1}}
