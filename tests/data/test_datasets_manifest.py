"""Manifests, inline specs, fingerprint verification, listing, and slicing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evalq.core.dataset import Corpus, Dataset, Qrels, Queries
from evalq.core.errors import InputError
from evalq.core.locations import BUILTIN_DATASETS
from evalq.data.assemble import DatasetWarning
from evalq.data.beir import load_beir
from evalq.data.fingerprint import fingerprint
from evalq.data.manifest import list_datasets, load_dataset, read_manifest
from evalq.data.slicing import slice_dataset

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "data" / "beir-tiny"


def test_repository_manifests_load_and_verify() -> None:
    rows = {row.name: row for row in list_datasets([REPO / "datasets", BUILTIN_DATASETS])}
    assert {"pydocs", "beir-tiny"} <= set(rows)
    assert rows["pydocs"].source == "pydocs" and rows["beir-tiny"].split == "test"
    ds = load_dataset("beir-tiny", search_dirs=[REPO / "datasets"])
    assert ds.source["fingerprint_verified"] is True
    assert len(ds.queries) == 4 and len(ds.corpus) == 8


def test_pydocs_manifest_verifies_its_environment_or_says_unverified() -> None:
    ds = load_dataset("pydocs", max_queries=5, max_docs=20)
    spec = read_manifest(BUILTIN_DATASETS / "pydocs.yaml")
    assert isinstance(spec.fingerprint, dict)
    known = ds.source["environment"] in spec.fingerprint
    assert ds.source["fingerprint_verified"] is known
    assert len(ds.queries) == 5 and len(ds.corpus) == 20


def copy_tiny(tmp_path: Path) -> Path:
    target = tmp_path / "data" / "tiny"
    shutil.copytree(TINY, target)
    return target


def write_manifest(folder: Path, text: str, name: str = "mine.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def test_manifest_paths_are_relative_to_the_manifest(tmp_path: Path) -> None:
    copy_tiny(tmp_path)
    write_manifest(tmp_path / "manifests", "name: tiny\nsource: beir\npath: ../data/tiny\n")
    ds = load_dataset("tiny", search_dirs=[tmp_path / "manifests"])
    assert ds.name == "tiny" and ds.source["fingerprint_verified"] is False
    assert ds.fingerprint == load_beir(TINY).fingerprint


def test_changed_data_fails_the_fingerprint_even_when_sliced(tmp_path: Path) -> None:
    data = copy_tiny(tmp_path)
    good = load_beir(data).fingerprint
    manifest = write_manifest(
        tmp_path / "m", f"name: tiny\nsource: beir\npath: ../data/tiny\nfingerprint: {good}\n"
    )
    assert load_dataset(str(manifest)).source["fingerprint_verified"] is True
    with (data / "corpus.jsonl").open("a") as handle:
        handle.write('{"_id": "new", "text": "an added document"}\n')
    for limits in ({}, {"max_queries": 1, "max_docs": 2}):
        with pytest.raises(InputError) as info:
            load_dataset("tiny", search_dirs=[tmp_path / "m"], **limits)
        assert info.value.field == "fingerprint" and "changed" in str(info.value)
        assert Path(info.value.file) == manifest


@pytest.mark.parametrize(
    ("text", "field", "needle"),
    [
        ("name: x\nsource: beir\npath: p\ncolour: red\n", "colour", "unknown field"),
        ("name: x\nsource: sql\n", "source", "Input should be"),
        ("name: x\nsource: beir\n", None, "needs the field `path`"),
        ("name: x\nsource: pydocs\npath: here\n", None, "takes no `path`"),
        ("name: x\nsource: beir\npath: p\nmax_docs: many\n", "max_docs", "integer"),
        ("- just\n- a list\n", None, "mapping"),
    ],
)
def test_bad_manifest_names_file_and_field(
    tmp_path: Path, text: str, field: str | None, needle: str
) -> None:
    path = write_manifest(tmp_path, text)
    with pytest.raises(InputError) as info:
        read_manifest(path)
    assert Path(info.value.file) == path and needle in str(info.value)
    if field is not None:
        assert info.value.field == field


def test_yaml_syntax_error_has_a_line(tmp_path: Path) -> None:
    path = write_manifest(tmp_path, "name: x\nsource: [beir\npath: p\n")
    with pytest.raises(InputError) as info:
        read_manifest(path)
    assert info.value.line is not None and "YAML" in str(info.value)


def test_unknown_name_suggests_a_close_one(tmp_path: Path) -> None:
    copy_tiny(tmp_path)
    write_manifest(tmp_path / "m", "name: scifact\nsource: beir\npath: ../data/tiny\n")
    with pytest.raises(InputError, match="Did you mean 'scifact'"):
        load_dataset("scifakt", search_dirs=[tmp_path / "m"])


def test_inline_specs_for_each_source(tmp_path: Path) -> None:
    data = copy_tiny(tmp_path)
    beir = load_dataset({"source": "beir", "path": str(data), "name": "inline"})
    assert beir.name == "inline" and beir.source["manifest"] is None
    (data / "topics.tsv").write_text("q1\thow does product quantization compress vectors\n"
                                     "q2\t8-bit quantization of model weights\n")
    (data / "qrels.trec").write_text("q1 0 d1 2\nq2 0 d2 2\n")
    trec = load_dataset(
        {"source": "trec", "trec": {"corpus": "corpus.jsonl", "queries": "topics.tsv",
                                    "qrels": "qrels.trec"}},
        base_dir=data,
    )
    assert trec.queries.texts == beir.queries.texts[:2]
    assert trec.qrels.judgments == {"q1": {"d1": 2}, "q2": {"d2": 2}}
    hf = load_dataset(
        {"source": "hf", "path": str(data), "hf": {
            "corpus": {"files": "corpus.jsonl"}, "queries": {"files": "queries.jsonl"},
            "qrels": {"files": "qrels/test.tsv"}}},
    )
    assert hf.fingerprint == beir.fingerprint  # same data through two loaders
    assert load_dataset({"source": "beir", "path": str(data), "use_titles": False}
                        ).corpus.titles == ("",) * 8


def test_inline_spec_limits_and_argument_override(tmp_path: Path) -> None:
    spec = {"source": "beir", "path": str(copy_tiny(tmp_path)), "max_queries": 2}
    assert len(load_dataset(spec).queries) == 2
    assert len(load_dataset(spec, max_queries=3).queries) == 3


def small_dataset() -> Dataset:
    corpus = Corpus(ids=tuple(f"d{i}" for i in range(10)), titles=("",) * 10,
                    texts=tuple(f"text {i}" for i in range(10)))
    queries = Queries(ids=("q1", "q2", "q3"), texts=("a", "b", "c"))
    qrels = Qrels({"q1": {"d9": 1, "d0": 0, "ghost": 1}, "q2": {"d7": 2, "d8": 1},
                   "q3": {"d1": 1}})
    return Dataset("small", corpus, queries, qrels, fingerprint(corpus, queries, qrels),
                   {"source": "test"})


def test_slice_keeps_relevant_documents_first() -> None:
    ds = small_dataset()
    cut = slice_dataset(ds, max_queries=2, max_docs=4)
    assert cut.queries.ids == ("q1", "q2")
    # relevant d9, d7, d8 first, then d0 (corpus order); kept documents stay in corpus order
    assert cut.corpus.ids == ("d0", "d7", "d8", "d9")
    assert cut.qrels.judgments == {"q1": {"d9": 1, "d0": 0, "ghost": 1},
                                   "q2": {"d7": 2, "d8": 1}}
    assert cut.fingerprint != ds.fingerprint
    assert cut.source["slice"]["parent_fingerprint"] == ds.fingerprint
    assert cut.source["source"] == "test"


def test_slice_too_small_for_relevant_documents_warns() -> None:
    with pytest.warns(DatasetWarning, match="1 relevant judgments dropped"):
        cut = slice_dataset(small_dataset(), max_queries=2, max_docs=2)
    assert cut.corpus.ids == ("d7", "d9")
    assert cut.qrels.judgments["q2"] == {"d7": 2}
    assert cut.source["slice"]["dropped_relevant_judgments"] == 1


def test_slice_without_cut_is_identity_and_rejects_bad_limits() -> None:
    ds = small_dataset()
    assert slice_dataset(ds) is ds and slice_dataset(ds, 10, 100) is ds
    with pytest.raises(InputError, match="positive integer"):
        slice_dataset(ds, max_queries=0)
