"""The built-in pydocs corpus: size, relevance structure, determinism across processes,
and the docstring-splitting rules."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from evalq.core.dataset import Dataset
from evalq.data.fingerprint import fingerprint
from evalq.data.pydocs import (
    MIN_BODY_CHARS,
    MIN_SUMMARY_CHARS,
    RawCollection,
    RawDoc,
    build_from_raw,
    collect_raw,
    load_pydocs,
    split_docstring,
)

BODY = "Details. " * 30  # 270 chars


@pytest.fixture(scope="module")
def pydocs() -> Dataset:
    return load_pydocs()


def test_size_and_sources(pydocs: Dataset) -> None:
    assert 500 <= len(pydocs.queries) <= len(pydocs.corpus)
    modules = {qid.split(".")[0] for qid in pydocs.queries.ids}
    assert "numpy" in modules and "json" in modules and len(modules) > 50
    assert pydocs.source["environment"].endswith(f"numpy{pydocs.source['numpy']}")


def test_each_query_has_exactly_its_own_document(pydocs: Dataset) -> None:
    doc_index = {docid: i for i, docid in enumerate(pydocs.corpus.ids)}
    assert len(doc_index) == len(pydocs.corpus)
    assert list(pydocs.qrels.judgments) == list(pydocs.queries.ids)
    for qid, text in zip(pydocs.queries.ids, pydocs.queries.texts, strict=True):
        assert pydocs.qrels.judgments[qid] == {qid: 1}
        assert qid in doc_index
        assert len(text) >= MIN_SUMMARY_CHARS
        assert not pydocs.corpus.texts[doc_index[qid]].startswith(text)
    assert len(set(pydocs.queries.texts)) == len(pydocs.queries)
    assert len(set(pydocs.corpus.texts)) == len(pydocs.corpus)


def test_texts_hold_no_addresses_or_environment(pydocs: Dataset) -> None:
    address = re.compile(r" at 0x[0-9a-fA-F]{6,}")
    assert not any(address.search(t) for t in pydocs.corpus.texts + pydocs.queries.texts)
    assert not any("environ({" in t for t in pydocs.corpus.texts)


def test_documents_start_with_the_signature(pydocs: Dataset) -> None:
    doc = dict(zip(pydocs.corpus.ids, pydocs.corpus.texts, strict=True))
    assert doc["json.dumps"].startswith("dumps(obj, *, skipkeys=False")
    summary = dict(zip(pydocs.queries.ids, pydocs.queries.texts, strict=True))
    assert summary["json.dumps"] == "Serialize ``obj`` to a JSON formatted ``str``."
    assert "Serialize ``obj``" not in doc["json.dumps"]


@pytest.mark.process
def test_fingerprint_matches_content_and_is_stable_across_processes(pydocs: Dataset) -> None:
    assert pydocs.fingerprint == fingerprint(pydocs.corpus, pydocs.queries, pydocs.qrels)
    # a second collection in this process bypasses the cache (fresh worker run)
    again = build_from_raw(collect_raw.__wrapped__())
    assert again.fingerprint == pydocs.fingerprint
    code = "from evalq.data.pydocs import load_pydocs; print(load_pydocs().fingerprint)"
    eval_dir = Path(__file__).resolve().parents[2] / "eval"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={"PYTHONPATH": str(eval_dir), "PATH": "/usr/bin:/bin", "PYTHONHASHSEED": "123"},
    )
    assert done.stdout.strip() == pydocs.fingerprint


def test_order_is_spread_across_modules(pydocs: Dataset) -> None:
    first = pydocs.queries.ids[:50]
    assert len({qid.split(".")[0] for qid in first}) > 10
    assert list(first) != sorted(first)


def test_caps_slice_deterministically(pydocs: Dataset) -> None:
    small = load_pydocs(max_queries=20, max_docs=100)
    assert len(small.queries) == 20 and len(small.corpus) == 100
    assert small.queries.ids == pydocs.queries.ids[:20]
    assert all(qid in small.corpus.ids for qid in small.queries.ids)
    assert small.source["slice"]["parent_fingerprint"] == pydocs.fingerprint
    assert small.fingerprint == load_pydocs(max_queries=20, max_docs=100).fingerprint


def test_split_docstring_rules() -> None:
    parts = split_docstring("f(a, b=1) -> int\n\nAdd two things.\n\nLonger text.")
    assert parts == (("f(a, b=1) -> int",), "Add two things.", "Longer text.")
    wrapped = split_docstring("array(object, dtype=None,\n      like=None)\n\n"
                              "Create an\n    array.\n\nBody")
    assert wrapped.signature_lines == ("array(object, dtype=None, like=None)",)
    assert wrapped.summary == "Create an array."
    prose = split_docstring("abs(x) is not a signature line.\nMore.")
    assert prose.signature_lines == () and prose.summary == "abs(x) is not a signature line."
    runaway = split_docstring("one\ntwo\nthree\nfour\nfive")
    assert runaway.summary == "" and runaway.body.startswith("one")


def raw(*docs: RawDoc) -> RawCollection:
    return RawCollection(python="3.x", numpy="n", platform="test", docs=docs)


def test_filters_and_dedupe_rules() -> None:
    ds = build_from_raw(raw(
        RawDoc("m.short_summary", "function", "short_summary", "()", "Too short.\n\n" + BODY),
        RawDoc("m.short_body", "function", "short_body", "()", "A long enough summary.\n\nx"),
        RawDoc("m.a", "function", "a", "(x)", "Shared summary for two.\n\n" + BODY + "a"),
        RawDoc("m.b", "function", "b", "(x)", "Shared summary for two.\n\n" + BODY + "b"),
        RawDoc("m.c", "function", "c", "(x)", "Unique summary line here.\n\n" + BODY),
        RawDoc("n.c", "function", "c", "(x)", "Other summary, same document.\n\n" + BODY),
    ))
    # short summary: distractor only; short body: dropped; shared summary: ambiguous,
    # queries dropped, documents kept; identical documents: the smallest id keeps it.
    assert set(ds.corpus.ids) == {"m.short_summary", "m.a", "m.b", "m.c"}
    assert ds.queries.ids == ("m.c",)
    assert ds.corpus.texts[ds.corpus.ids.index("m.c")] == "c(x)\n\n" + BODY.strip()
    assert len(BODY.strip()) >= MIN_BODY_CHARS
    assert ds.source["ambiguous_summaries_dropped"] == 2
    assert ds.source["duplicate_documents_dropped"] == 1
