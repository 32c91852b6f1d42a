"""Document vectors borrowed from a pgvector table or a Qdrant shard (issue 31, "vectors on
disk can be a pgvector table or a Qdrant collection"), on the session's embedded
PostgreSQL and Qdrant's engine (tests/retrieve/conftest.py).

What is checked: the rows come back by corpus id in the corpus's order whatever the
table's order (halfvec read as floats, ids from a payload key or the point id); the plan
checks a database source as it checks a vector file (width against the model, unique
ids, every corpus document present, the table, its columns and the shard named in the
refusal); and end to end, the reference's own vectors in a table or a shard pass the
probe and rank as the reference does, while drifted ones stop the run with exit 2.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalq.app.api import run_recipe_file
from evalq.core.errors import InputError
from evalq.recipe.plan import PlanError, describe_plan
from evalq.retrieve import pg_server, stored_vectors
from support import recipes
from support.deployed import (
    corpus_ids,
    plan_documents,
    random_rows,
    reference_documents,
)


def _table(pg: pg_server.Database, ids: list[str], vectors: np.ndarray,
           column: str = "vector") -> str:
    """A deployment's table (doc_id text, embedding), rows in reverse order."""
    name = f"deployed_{uuid.uuid4().hex[:8]}"
    conn = pg_server.connect(pg, "test")
    try:
        conn.execute(f"CREATE TABLE {name} (doc_id text, embedding "
                     f"{column}({vectors.shape[1]}))")
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {name} VALUES (%s, %s::{column})",
                            [(d, str(v.tolist())) for d, v in zip(ids[::-1],
                                                                  vectors[::-1])])
    finally:
        conn.close()
    return name


def _shard(root: Path, ids: list[str], vectors: np.ndarray, payload: bool = True) -> Path:
    """A Qdrant shard with the documents as points (payload ``id``: the document id)."""
    import qdrant_edge as qe

    folder = root / f"deployed-{uuid.uuid4().hex[:8]}"
    shard = qe.EdgeShard.create(str(folder), qe.EdgeConfig(vectors=qe.EdgeVectorParams(
        size=int(vectors.shape[1]), distance=qe.Distance.Dot)))
    try:
        shard.update(qe.UpdateOperation.upsert_points([
            qe.Point(i if payload else int(d), v.tolist(), {"id": d} if payload else None)
            for i, (d, v) in enumerate(zip(ids[::-1], vectors[::-1]))]))
    finally:
        shard.close()
    return folder


# -- reading by corpus id -----------------------------------------------------------------

@pytest.mark.server
def test_rows_come_back_by_corpus_id_in_corpus_order(pg: pg_server.Database,
                                                     qdrant_root: Path) -> None:
    ids = [f"doc-{i}" for i in range(40)]
    vectors = random_rows(40, width=8)
    wanted = ids[5:25][::-1]
    expect = vectors[[ids.index(d) for d in wanted]]
    table = _table(pg, ids, vectors)
    got = stored_vectors.pgvector_rows(pg.dsn, table, "doc_id", "embedding", wanted, "x")
    np.testing.assert_array_equal(got, expect)
    half = _table(pg, ids, vectors, column="halfvec")
    got = stored_vectors.pgvector_rows(pg.dsn, half, "doc_id", "embedding", wanted, "x")
    np.testing.assert_allclose(got, expect, rtol=1e-3, atol=1e-3)
    assert stored_vectors.pgvector_header(pg.dsn, table, "doc_id", "embedding", "x") == (
        ids[::-1], 8)
    shard = _shard(qdrant_root, ids, vectors)
    np.testing.assert_array_equal(stored_vectors.qdrant_rows(shard, "id", wanted, "x"),
                                  expect)
    numbered = [str(i) for i in range(40)]  # ids that are the point ids themselves
    by_point = _shard(qdrant_root, numbered, vectors, payload=False)
    np.testing.assert_array_equal(stored_vectors.qdrant_rows(by_point, None, ["7", "3"],
                                                             "x"), vectors[[7, 3]])
    with pytest.raises(InputError, match=r"lacks 1 documents of the corpus, e\.g\. other"):
        stored_vectors.qdrant_rows(shard, "id", ["doc-1", "other"], "x")


# -- the plan ---------------------------------------------------------------------------

@pytest.mark.server
def test_a_table_and_a_shard_of_the_corpus_plan(pg: pg_server.Database, qdrant_root: Path,
                                                tmp_path: Path) -> None:
    ids = [*corpus_ids(), "extra-doc"]
    table = _table(pg, ids, random_rows(len(ids)))
    plan = plan_documents(tmp_path, {"pgvector": {"dsn": pg.dsn, "table": table,
                                         "id_column": "doc_id"}})
    assert plan.variant("deployed").sides.documents_file.pgvector.table == table
    text = describe_plan(plan)
    assert f"documents reused from pgvector table {table} at postgresql://" in text
    shard = _shard(qdrant_root, ids, random_rows(len(ids)))
    plan = plan_documents(tmp_path, {"qdrant": {"path": str(shard.parent),
                                       "collection": shard.name}})
    assert f"documents reused from Qdrant shard {shard}" in describe_plan(plan)


@pytest.mark.server
@pytest.mark.parametrize(("case", "words"), [
    ("no table", "there is no table"),
    ("no column", 'column "nope" does not exist'),
    ("width", "are 100 wide, but deployed's model"),
    ("dupes", "repeat"),
    ("lacks", "lacks 1 of the 30 documents of dataset pydocs"),
    ("no shard", "there is no Qdrant shard"),
    ("no payload", "has no payload key 'doc'")])
def test_a_bad_database_source_is_refused_with_the_fix(
        pg: pg_server.Database, qdrant_root: Path, tmp_path: Path, case: str,
        words: str) -> None:
    ids = corpus_ids()
    width = 100 if case == "width" else 384
    if case == "dupes":
        ids = [*ids[:-1], ids[0]]
    elif case == "lacks":
        ids = [*ids[:-1], "other"]
    source: dict[str, Any]
    if case in ("no shard", "no payload"):
        shard = _shard(qdrant_root, ids, random_rows(len(ids)))
        source = {"qdrant": {"path": str(shard if case == "no payload" else
                                         shard.parent / "elsewhere"),
                             "id_payload": "doc"}}
    else:
        table = _table(pg, ids, random_rows(len(ids), width=width))
        source = {"pgvector": {"dsn": pg.dsn, "id_column": "doc_id",
                               "table": "missing_table" if case == "no table" else table,
                               "vector_column": "nope" if case == "no column"
                               else "embedding"}}
    with pytest.raises(PlanError) as caught:
        plan_documents(tmp_path, source)
    text = str(caught.value)
    assert words in text and "candidates.0.documents" in text, text


def test_a_source_is_one_of_a_file_a_table_or_a_shard(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="exactly one") as caught:
        plan_documents(tmp_path, {"path": "vec.npy", "ids": "ids.txt",
                         "pgvector": {"dsn": "postgresql://h/db", "table": "t"}})
    assert caught.value.field == "candidates.0.documents"
    with pytest.raises(InputError, match=r"pgvector\.table: String should match pattern"):
        plan_documents(tmp_path, {"pgvector": {"dsn": "postgresql://h/db", "table": "t; DROP"}})


# -- end to end: the probe against the reference engine ----------------------------------

@pytest.mark.slow
@pytest.mark.model
@pytest.mark.server
def test_the_reference_vectors_in_a_database_pass_and_drifted_ones_stop_the_run(
        pg: pg_server.Database, qdrant_root: Path, tmp_path: Path) -> None:
    # the deployed index: today's reference vectors of the corpus
    data, ds, docs = reference_documents(tmp_path)
    ids = list(ds.corpus.ids)
    table, shard = _table(pg, ids, docs), _shard(qdrant_root, ids, docs)
    candidates = [
        {"name": "pg", "queries": "reference", "documents": {"pgvector": {
            "dsn": pg.dsn, "table": table, "id_column": "doc_id"}}},
        {"name": "qd", "queries": "reference", "documents": {"qdrant": {
            "path": str(shard)}}}]
    outcome = run_recipe_file(recipes.write(tmp_path / "keep.yaml", {
        **data, "candidates": candidates}), progress=False)
    variants = outcome.summary["datasets"]["pydocs"]["variants"]
    for name, source in (("pg", f"pgvector table {table} at"), ("qd", "Qdrant shard")):
        encode = variants[name]["encode"]
        assert encode["reused"]["documents"].startswith(source)
        assert encode["probe"]["passed"] and encode["probe"]["lowest_cosine"] >= 0.999
        assert variants[name]["metrics"]["nDCG@10"]["value"] == pytest.approx(
            variants["fp32"]["metrics"]["nDCG@10"]["value"], abs=1e-6)
    drifted = _table(pg, ids, docs + np.random.default_rng(7).normal(
        scale=0.02, size=docs.shape).astype(np.float32))
    candidates[0]["documents"]["pgvector"]["table"] = drifted
    with pytest.raises(InputError) as caught:
        run_recipe_file(recipes.write(tmp_path / "drift.yaml", {
            **data, "output": str(tmp_path / "drift"), "candidates": candidates[:1]}),
            progress=False)
    text = str(caught.value)
    assert f"pgvector table {drifted}" in text and "< 0.999" in text
    assert "candidates.0.documents.probe" in text
