"""Fault class "a deployed index's rows are broken" (issue 32): a candidate's documents read
from a pgvector table (``documents: {pgvector: ...}``) whose corpus rows are not all one
vector of one width. The plan reads one row's width only; the run read every row and
stacked them, so a NULL vector or a row of another width (a ``vector`` column declared
without a width takes any) ended in numpy's ValueError, an exit 3 after the reference had
encoded. Each is refused naming the table, the column's field and the rows. A Qdrant
shard's NaN or infinite row is refused the same way, as a vector file's is: it used to
leave every ranking without a word."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from evalq.core.errors import InputError
from evalq.retrieve import pg_server, stored_vectors

pytestmark = pytest.mark.server

IDS = [f"doc-{i}" for i in range(6)]


@pytest.fixture(scope="session")
def pg() -> Iterator[pg_server.Database]:
    """The session's embedded PostgreSQL, as tests/retrieve/conftest.py's (one server per
    process: its worker group is the databases')."""
    yield pg_server.embedded(None, allow_root=True, where="test")


def _table(pg: pg_server.Database, rows: list[str | None]) -> str:
    """A deployment's table (doc_id text, embedding vector) with no declared width."""
    name = f"deployed_{uuid.uuid4().hex[:8]}"
    conn = pg_server.connect(pg, "test")
    try:
        conn.execute(f"CREATE TABLE {name} (doc_id text, embedding vector)")
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {name} VALUES (%s, %s::vector)",
                            list(zip(IDS, rows)))
    finally:
        conn.close()
    return name


def _rows(width: int, n: int = len(IDS)) -> list[str | None]:
    vectors = np.random.default_rng(0).normal(size=(n, width)).astype(np.float32)
    return [str(v.tolist()) for v in vectors]


@pytest.mark.parametrize("odd", ["NULL", "narrower"])
def test_a_row_that_is_no_vector_of_the_width_is_refused(pg: pg_server.Database,
                                                         odd: str) -> None:
    rows = _rows(8)
    rows[3] = None if odd == "NULL" else _rows(5, 1)[0]
    table = _table(pg, rows)
    with pytest.raises(InputError) as caught:
        stored_vectors.pgvector_rows(pg.dsn, table, "doc_id", "embedding", IDS,
                                     "candidates.0.documents")
    assert caught.value.field == "candidates.0.documents.pgvector.vector_column"
    assert table in caught.value.message and "doc-3" in caught.value.message
    assert "8 wide" in caught.value.message and caught.value.fix
    # the rows that are fine still read back as they were stored
    ok = [d for d in IDS if d != "doc-3"]
    got = stored_vectors.pgvector_rows(pg.dsn, table, "doc_id", "embedding", ok, "x")
    assert got.shape == (len(ok), 8)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_non_finite_row_of_a_qdrant_shard_is_refused_not_dropped(
        tmp_path: Path, bad: float) -> None:
    """Qdrant stores NaN and inf as given. Such a row came back as it was, the probe
    (16 sampled rows) passed over it, and FAISS gave its document no score: it left
    every ranking of the run, reported as an index that returned fewer documents. A
    vector file's row of the same kind was refused."""
    import qdrant_edge as qe

    vectors = np.random.default_rng(0).normal(size=(len(IDS), 8)).astype(np.float32)
    vectors[4, 2] = bad
    shard = qe.EdgeShard.create(str(tmp_path / "shard"), qe.EdgeConfig(
        vectors=qe.EdgeVectorParams(size=8, distance=qe.Distance.Dot)))
    try:
        shard.update(qe.UpdateOperation.upsert_points([
            qe.Point(i, v.tolist(), {"id": d}) for i, (d, v) in enumerate(zip(IDS, vectors))]))
    finally:
        shard.close()
    with pytest.raises(InputError) as caught:
        stored_vectors.qdrant_rows(tmp_path, "id", IDS, "candidates.0.documents")
    assert caught.value.field == "candidates.0.documents.qdrant"
    assert str(tmp_path) in caught.value.message and "doc-4" in caught.value.message
    assert "NaN or infinite" in caught.value.message
