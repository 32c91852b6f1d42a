"""Borrowed sides at plan time (issue 31): ``documents:`` / ``queries:`` from an earlier
variant or a vector file; every mismatch refused with exit 2 naming both sides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalq.core.errors import InputError
from evalq.data.manifest import load_dataset
from evalq.recipe.plan import PlanError, describe_plan, plan_file
from support import recipes

QUERIES, DOCS = 10, 30


def _plan(tmp_path: Path, candidates: list[dict[str, Any]], **extra: Any) -> Any:
    data = recipes.recipe("sides", cache=tmp_path / "cache", output=tmp_path / "out",
                          queries=QUERIES, docs=DOCS, candidates=candidates, **extra)
    return plan_file(recipes.write(tmp_path / "sides.yaml", data))


def _problems(tmp_path: Path, candidates: list[dict[str, Any]], **extra: Any) -> str:
    with pytest.raises(PlanError) as caught:
        _plan(tmp_path, candidates, **extra)
    assert isinstance(caught.value, InputError)  # exit 2
    return str(caught.value)


def _ids(side: str = "documents") -> list[str]:
    """The ids of the slice's documents or queries, as the run reads them."""
    ds = load_dataset(recipes.PYDOCS, max_queries=QUERIES, max_docs=DOCS)
    return list(ds.corpus.ids if side == "documents" else ds.queries.ids)


def _vectors(tmp_path: Path, ids: list[str], width: int = 384, rows: int | None = None,
             dtype: str = "float32", *, unit: bool = True, name: str = "vec"
             ) -> dict[str, str]:
    """A ``.npy`` of random rows (unit length, as MiniLM's normalized vectors are, unless
    ``unit`` is False) and its ids file, for either side."""
    m = np.random.default_rng(0).normal(size=(rows or len(ids), width))
    if unit:
        m /= np.linalg.norm(m, axis=1, keepdims=True)
    np.save(tmp_path / f"{name}.npy", m.astype(dtype))
    (tmp_path / f"{name}-ids.txt").write_text("\n".join(ids) + "\n", encoding="utf-8")
    return {"path": f"{name}.npy", "ids": f"{name}-ids.txt"}


def test_the_plan_shows_what_is_encoded_and_what_is_reused(tmp_path: Path) -> None:
    plan = _plan(tmp_path, [
        {"name": "q-int8", "quantization": {"method": "torch-dynamic-int8"},
         "documents": "reference"},
        {"name": "bin-docs", "documents": "reference", "queries": "fp32",
         "vectors": {"quantize": "binary", "queries": "float"}},
        {"name": "d-only", "queries": "q-int8"}])
    sides = {v.name: v.sides for v in plan.variants}
    assert sides["q-int8"].documents == "fp32" and sides["q-int8"].encodes_queries
    assert not sides["bin-docs"].builds_engine
    assert sides["d-only"].queries == "q-int8" and sides["d-only"].encodes_documents
    assert not sides["fp32"].borrows
    text = describe_plan(plan)
    assert "encodes queries; documents reused from variant fp32 (not encoded)" in text
    assert "encodes nothing (no engine is built)" in text
    assert "binary, float queries" in text


@pytest.mark.parametrize(("value", "words"), [
    ("nope", "unknown variant 'nope'"),
    ("later", "listed after it"),
    ("self", "names the variant itself")])
def test_borrowing_from_an_unknown_later_or_same_variant_is_refused(
        tmp_path: Path, value: str, words: str) -> None:
    text = _problems(tmp_path, [
        {"name": "self", "documents": value},
        {"name": "later"}])
    assert words in text and "candidates.0.documents" in text
    assert "use reference or one of the variants listed before it: fp32" in text


def test_the_reference_borrows_nothing(tmp_path: Path) -> None:
    data = recipes.recipe("sides", cache=tmp_path / "c", output=tmp_path / "o",
                          queries=QUERIES, docs=DOCS, reference={"name": "fp32",
                                                                 "queries": "fp32"})
    with pytest.raises(PlanError, match="is the reference, which encodes both sides"):
        plan_file(recipes.write(tmp_path / "r.yaml", data))


def test_vectors_dims_on_the_borrower_truncates_both_sides(tmp_path: Path) -> None:
    """The borrowed vectors are the lender's before its own truncation; the borrower's
    vectors.dims applies to both sides, a variant's as a file's (issue 32)."""
    plan = _plan(tmp_path, [{"name": "short", "documents": "reference",
                             "vectors": {"dims": 128}},
                            {"name": "short-file", "documents": _vectors(tmp_path, _ids()),
                             "vectors": {"dims": 128}}])
    text = describe_plan(plan)
    assert text.count("both sides truncated to vectors.dims 128") == 2, text


def test_a_normalization_mismatch_names_both_sides(tmp_path: Path) -> None:
    text = _problems(tmp_path, [{"name": "raw", "documents": "reference",
                                 "encoding": {"normalize": False}}])
    assert "normalize=True" in text and "normalize=False" in text
    assert "candidates.0.encoding.normalize" in text


def test_a_model_of_another_family_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other-model"
    other.mkdir()
    (other / "config.json").write_text('{"model_type": "xlm-roberta", "hidden_size": 768}')
    (other / "tokenizer.json").write_text("{}")
    with pytest.raises(PlanError) as caught:
        _plan(tmp_path, [{"name": "other", "model": str(other), "queries": "reference"}])
    text = str(caught.value)
    assert "a bert model of width 384" in text and "xlm-roberta model of width 768" in text


def test_float_queries_need_quantized_documents(tmp_path: Path) -> None:
    with pytest.raises(Exception, match=r"vectors\.queries: float"):
        _plan(tmp_path, [{"name": "x", "vectors": {"queries": "float"}}])


SIDES = ("documents", "queries")


@pytest.mark.parametrize("side", SIDES)
def test_a_good_vector_file_plans(tmp_path: Path, side: str) -> None:
    stored = _vectors(tmp_path, [*_ids(side), "extra-id"])
    plan = _plan(tmp_path, [{"name": "disk", side: stored}])
    assert plan.variant("disk").sides.stored(side) is not None
    assert f"{side} reused from file vec.npy" in describe_plan(plan)


def test_both_sides_from_files_build_no_engine_and_the_plan_names_each_file(
        tmp_path: Path) -> None:
    plan = _plan(tmp_path, [{"name": "disk",
                             "documents": _vectors(tmp_path, _ids(), name="docs"),
                             "queries": _vectors(tmp_path, _ids("queries"), name="qs")}])
    sides = plan.variant("disk").sides
    assert not sides.builds_engine and sides.reads_files
    assert ("encodes nothing (no engine is built); documents reused from file docs.npy "
            "(not encoded); queries reused from file qs.npy (not encoded)") in describe_plan(plan)


@pytest.mark.parametrize("side", SIDES)
@pytest.mark.parametrize(("case", "words"), [
    ("missing", "does not exist"),
    ("noids", "has no ids file"),
    ("width", "vectors of file vec.npy are 100 wide, but disk's model"),
    ("norms", "are not unit length"),
    ("rows", "rows but"),
    ("dupes", "repeat"),
    ("lacks", "lacks 1 of the {n} {side} of dataset pydocs"),
    ("int", "a ({side}, dim) float matrix is needed"),
    ("1d", "1-D")])
def test_a_bad_vector_file_is_refused_with_the_fix(tmp_path: Path, side: str, case: str,
                                                   words: str) -> None:
    ids = _ids(side)
    stored = _vectors(tmp_path, ids)
    if case == "missing":
        stored["path"] = "nowhere.npy"
    elif case == "noids":
        del stored["ids"]
    elif case in ("width", "norms", "rows", "int"):
        _vectors(tmp_path, ids, **{"width": {"width": 100}, "norms": {"unit": False},
                                   "rows": {"rows": len(ids) + 1},
                                   "int": {"dtype": "int32"}}[case])
    elif case in ("dupes", "lacks"):
        _vectors(tmp_path, [*ids[:-1], ids[0] if case == "dupes" else "other"])
    elif case == "1d":
        np.save(tmp_path / "vec.npy", np.zeros(len(ids), dtype=np.float32))
    text = _problems(tmp_path, [{"name": "disk", side: stored}])
    assert words.format(n=len(ids), side=side) in text and f"candidates.0.{side}" in text
    if case == "norms":  # both sides named, and the fix
        assert "disk encodes the other side with normalize=True" in text
        assert f"save the {side}' vectors normalized" in text


@pytest.mark.parametrize("side", SIDES)
def test_one_file_for_two_datasets_is_refused(tmp_path: Path, side: str) -> None:
    stored = _vectors(tmp_path, _ids(side))
    two = [recipes.PYDOCS, {**recipes.PYDOCS, "name": "pydocs2"}]
    text = _problems(tmp_path, [{"name": "disk", side: stored}], datasets=two)
    assert "one vector file for 2 datasets" in text and "pydocs2: {path" in text
    assert f"{side}: {{datasets:" in text


@pytest.mark.parametrize("side", SIDES)
def test_a_parquet_file_plans_and_a_wrong_column_is_refused(tmp_path: Path,
                                                            side: str) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    ids = _ids(side)
    vectors = np.random.default_rng(0).normal(size=(len(ids), 384))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    pq.write_table(pa.table({"id": ids, "vector": vectors.tolist()}), tmp_path / "v.parquet")
    plan = _plan(tmp_path, [{"name": "disk", side: {"path": "v.parquet"}}])
    assert plan.variant("disk").sides.stored(side) is not None
    text = _problems(tmp_path, [{"name": "disk", side: {
        "path": "v.parquet", "vector_column": "embedding"}}])
    assert "has no column 'embedding' (it has id, vector)" in text
    assert f"set {side}.id_column / vector_column" in text


@pytest.mark.parametrize("source", [
    {"pgvector": {"dsn": "postgresql://localhost/x", "table": "queries"}},
    {"qdrant": {"path": "shards"}},
    {"datasets": {"pydocs": {"pgvector": {"dsn": "postgresql://localhost/x",
                                          "table": "q"}}}}])
def test_queries_from_a_database_are_refused(tmp_path: Path, source: dict[str, Any]) -> None:
    """Queries are encoded online and never kept in an index: nothing to read there."""
    text = _problems(tmp_path, [{"name": "db", "queries": source}])
    assert "candidates.0.queries" in text and "query vectors are not kept in an index" in text
    assert "queries: {path: queries.npy, ids: query-ids.txt}" in text


def test_only_must_keep_the_lender(tmp_path: Path) -> None:
    data = recipes.recipe("sides", cache=tmp_path / "c", output=tmp_path / "o",
                          queries=QUERIES, docs=DOCS, candidates=[
                              {"name": "a", "quantization": {"method": "torch-dynamic-int8"}},
                              {"name": "b", "documents": "a"}])
    path = recipes.write(tmp_path / "only.yaml", data)
    with pytest.raises(PlanError, match="which --only leaves out"):
        plan_file(path, only=["b"])
    assert plan_file(path, only=["a", "b"]).variant("b").sides.documents == "a"
