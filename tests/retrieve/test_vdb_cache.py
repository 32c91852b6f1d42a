"""Tables and shards cached by the vectors' key, and resumed after an interrupted ingest
(issue 30, "cached and resumable"), on the session's real embedded PostgreSQL + pgvector
and Qdrant's engine (tests/retrieve/conftest.py).

What is checked: a second build of the same vectors with the same build options reuses
the table / shard (no ingest, no index build, the rows unchanged, "reused" and the key in
the record); an ingest stopped half-way is finished by the next build with exactly the
corpus (no duplicate, none lost) and ranks as exact search does; changed vectors, ids or
build options are another key, changed search options the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalq.core.errors import InputError
from evalq.core.ranking import Ranking
from evalq.retrieve import keyed, pg_server, pgvector_kind
from evalq.retrieve.exact import ExactOptions
from evalq.retrieve.kinds import Documents, KindOptions, Queries
from evalq.retrieve.pgvector_kind import PgvectorIndex
from evalq.retrieve.pgvector_options import PgvectorSweep
from evalq.retrieve.qdrant_kind import QdrantIndex
from evalq.retrieve.registry import INDEX_KINDS

K = 10


def _corpus(seed: int, n_docs: int = 1200, dim: int = 24) -> tuple[Documents, Queries]:
    rng = np.random.default_rng(seed)
    docs = rng.standard_normal((n_docs, dim)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = docs[rng.choice(n_docs, 20, replace=False)] + 0.05 * rng.standard_normal(
        (20, dim)).astype(np.float32)
    return (Documents(tuple(f"doc-{i:05d}" for i in range(n_docs)), docs),
            Queries(tuple(f"q{i}" for i in range(20)), queries.astype(np.float32)))


def _options(spec: dict[str, Any]) -> KindOptions:
    return INDEX_KINDS.parse(spec, "vectors", "faiss")


def _pg(**extra: Any) -> KindOptions:
    return _options({"kind": "pgvector", "allow_root": True, **extra})


def _built(options: KindOptions, docs: Documents, queries: Queries
           ) -> tuple[Ranking, dict[str, Any], Any]:
    index = INDEX_KINDS.build(options, docs, where="candidates.x.index")
    try:
        return index.search(queries, K), dict(index.stats().detail), index.proof()
    finally:
        index.close()


def _exact(docs: Documents, queries: Queries) -> Ranking:
    index = INDEX_KINDS.build(ExactOptions(), docs, where="x")
    try:
        return index.search(queries, K)
    finally:
        index.close()


def _rows(pg: pg_server.Database, table: str) -> tuple[int, int]:
    """(rows, distinct ids) of a table."""
    conn = pg_server.connect(pg, "test")
    try:
        total, distinct = conn.execute(
            f"SELECT count(*), count(DISTINCT id) FROM {table}").fetchone()
    finally:
        conn.close()
    return int(total), int(distinct)


def _same_as_exact(ranking: Ranking, exact: Ranking) -> None:
    np.testing.assert_allclose(ranking.scores[:, :K], exact.scores[:, :K], atol=1e-5)
    for row in range(len(exact.query_ids)):
        assert set(ranking.indices[row, :K]) == set(exact.indices[row, :K]), row


# -- the key: the fast tier -------------------------------------------------------------

def test_the_key_follows_the_vectors_the_ids_and_the_build_options_only() -> None:
    docs, _ = _corpus(0, n_docs=50)
    assert docs.vectors is not None

    def key(ids: tuple[str, ...] = docs.ids, vectors: np.ndarray = docs.vectors,
            **options: Any) -> str:
        return keyed.vectors_key("pgvector", ids, vectors, keyed.build_options(
            _pg(**options), PgvectorSweep.BUILD_TIME))

    base = key(m=16)
    changed = docs.vectors.copy()
    changed[7, 3] += 1e-3
    assert key(vectors=changed, m=16) != base  # one float of one document
    assert key(ids=(*docs.ids[:-1], "other"), m=16) != base
    assert key(ids=docs.ids[::-1], vectors=docs.vectors[::-1], m=16) != base  # the order
    for build in ({"m": 8}, {"m": 16, "ef_construction": 200}, {"m": 16,
                  "vector_type": "halfvec"}, {"m": 16, "operator": "<=>"},
                  {"index": "ivfflat", "lists": 4}):
        assert key(**build) != base, build
    # search-time settings and where the database is do not shape the stored table
    assert key(m=16, ef_search=200, iterative_scan="strict_order") == base
    assert key(m=16, data_dir="/tmp/elsewhere", enable_seqscan=True) == base
    assert keyed.vectors_key("qdrant", docs.ids, docs.vectors, {}) != keyed.vectors_key(
        "pgvector", docs.ids, docs.vectors, {})


# -- pgvector, on the session's embedded server ------------------------------------------

@pytest.mark.server
def test_pgvector_reuses_a_complete_table(pg: pg_server.Database) -> None:
    docs, queries = _corpus(1)
    first, first_stats, _ = _built(_pg(m=8, ef_construction=32, ef_search=100), docs,
                                   queries)
    # another search-time setting: the same table, searched as it is
    again, stats, proof = _built(_pg(m=8, ef_construction=32, ef_search=120), docs, queries)
    assert not first_stats["reused"] and first_stats["rows_loaded"] == len(docs.ids)
    assert stats["reused"] and stats["cache_key"] == first_stats["cache_key"]
    assert stats["table"] == first_stats["table"]
    assert stats["copy_s"] == stats["index_build_s"] == 0.0 == stats["rows_loaded"]
    assert stats["index_bytes"] == first_stats["index_bytes"] > 0
    assert _rows(pg, stats["table"]) == (len(docs.ids), len(docs.ids))
    assert proof.method == "Index Scan" and proof.params["index_name"] == \
        f"{stats['table']}_idx"
    assert set(again.indices[0, :K]) == set(first.indices[0, :K])
    # another build option: another table, loaded and indexed anew
    _, other, _ = _built(_pg(m=12, ef_construction=32), docs, queries)
    assert not other["reused"] and other["cache_key"] != stats["cache_key"]


@pytest.mark.server
def test_an_interrupted_pgvector_ingest_resumes_to_exactly_the_corpus(
        pg: pg_server.Database, monkeypatch: pytest.MonkeyPatch) -> None:
    docs, queries = _corpus(2)
    options = _pg(index="none")
    monkeypatch.setattr(pgvector_kind, "_COPY_BATCH", 300)
    real, calls = PgvectorIndex._copy, []

    def stops_on_the_third(self: PgvectorIndex, sql_ids: np.ndarray,
                           vectors: np.ndarray) -> None:
        calls.append(len(sql_ids))
        if len(calls) == 3:
            raise KeyboardInterrupt  # Ctrl-C during the third batch's COPY
        real(self, sql_ids, vectors)

    monkeypatch.setattr(PgvectorIndex, "_copy", stops_on_the_third)
    with pytest.raises(KeyboardInterrupt):
        INDEX_KINDS.build(options, docs, where="x")
    monkeypatch.setattr(PgvectorIndex, "_copy", real)
    key = keyed.vectors_key("pgvector", docs.ids, docs.vectors,
                            keyed.build_options(options, PgvectorSweep.BUILD_TIME))
    table = f"evalq_{key[:24]}"
    assert _rows(pg, table) == (600, 600)  # two batches committed, the third not
    ranking, stats, proof = _built(options, docs, queries)
    assert stats["rows_resumed"] == 600 and not stats["reused"] and stats["table"] == table
    assert stats["rows_loaded"] == len(docs.ids) - 600
    assert _rows(pg, table) == (len(docs.ids), len(docs.ids))  # none lost, none twice
    _same_as_exact(ranking, _exact(docs, queries))
    assert proof.method == "Seq Scan"
    _, stats, _ = _built(options, docs, queries)  # now complete: reused
    assert stats["reused"] and _rows(pg, table) == (len(docs.ids), len(docs.ids))


@pytest.mark.server
def test_a_resumed_pgvector_table_gets_its_index(pg: pg_server.Database,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The index is built once every row is in, also after a resume."""
    docs, queries = _corpus(3)
    options = _pg(m=8, ef_construction=32, ef_search=200)
    index = PgvectorIndex(options, "x")  # type: ignore[arg-type]
    monkeypatch.setattr(PgvectorIndex, "_create_index", lambda self: (_ for _ in ()).throw(
        KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):
        index.add(docs)  # every row in, stopped before the index
    index.close()
    monkeypatch.undo()
    _, stats, proof = _built(options, docs, queries)
    assert stats["rows_resumed"] == len(docs.ids) and not stats["reused"]
    assert stats["rows_loaded"] == 0 and stats["index_bytes"] > 0
    assert proof.method == "Index Scan"


# -- Qdrant, in-process, shards kept in the session's folder -----------------------------

def _qdrant(root: Path, **extra: Any) -> KindOptions:
    return _options({"kind": "qdrant", "path": str(root), **extra})


@pytest.mark.server
def test_qdrant_reuses_a_complete_shard_and_a_new_key_builds_anew(qdrant_root: Path
                                                                 ) -> None:
    docs, queries = _corpus(4)
    options = _qdrant(qdrant_root, hnsw_config={"m": 8, "ef_construct": 32},
                      search_params={"hnsw_ef": 64})
    first, first_stats, _ = _built(options, docs, queries)
    again, stats, proof = _built(_qdrant(qdrant_root, hnsw_config={"m": 8,
                                                                   "ef_construct": 32},
                                         search_params={"hnsw_ef": 80}), docs, queries)
    assert not first_stats["reused"] and first_stats["rows_loaded"] == len(docs.ids)
    assert stats["reused"] and stats["cache_key"] == first_stats["cache_key"]
    assert stats["upsert_s"] == stats["optimize_s"] == 0.0 == stats["rows_loaded"]
    assert stats["points"] == stats["indexed_vectors"] == len(docs.ids)
    assert proof.method == "HNSW" and not proof.exact
    assert set(again.indices[0, :K]) == set(first.indices[0, :K])
    _, other, _ = _built(_qdrant(qdrant_root, quantization_config={"scalar": {}}), docs,
                         queries)
    assert not other["reused"] and other["cache_key"] != stats["cache_key"]
    changed = Documents(docs.ids, docs.vectors[::-1].copy())
    _, moved, _ = _built(options, changed, queries)
    assert not moved["reused"] and moved["cache_key"] != stats["cache_key"]


@pytest.mark.server
def test_an_interrupted_qdrant_ingest_resumes_to_exactly_the_corpus(
        qdrant_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs, queries = _corpus(5)
    options = _qdrant(qdrant_root, search_params={"exact": True})
    real = QdrantIndex._upsert

    def half_then_stop(self: QdrantIndex, vectors: np.ndarray, have: set[int]) -> None:
        real(self, vectors[:len(vectors) // 2], have)
        raise KeyboardInterrupt

    monkeypatch.setattr(QdrantIndex, "_upsert", half_then_stop)
    with pytest.raises(KeyboardInterrupt):
        INDEX_KINDS.build(options, docs, where="x")
    monkeypatch.undo()
    ranking, stats, _ = _built(options, docs, queries)
    assert stats["rows_resumed"] == len(docs.ids) // 2 and not stats["reused"]
    assert stats["rows_loaded"] == len(docs.ids) - len(docs.ids) // 2
    assert stats["points"] == len(docs.ids)  # upserted by id: none twice, none lost
    _same_as_exact(ranking, _exact(docs, queries))
    _, stats, _ = _built(options, docs, queries)
    assert stats["reused"] and stats["points"] == len(docs.ids)



@pytest.mark.server
def test_a_qdrant_shard_that_breaks_mid_run_is_exit_2_with_the_rerun(qdrant_root: Path
                                                                     ) -> None:
    """Closed under the run between ingest and search (qdrant-edge's own error, a bare
    Exception): exit 2 naming the shard, the candidate's index and what a rerun keeps;
    the rerun finds the shard complete and reuses it."""
    docs, queries = _corpus(7, n_docs=300)
    options = _qdrant(qdrant_root)
    index = INDEX_KINDS.build(options, docs, where="candidates.qd.index")
    try:
        assert isinstance(index, QdrantIndex)
        index._shard.close()  # the engine's shard, not the index: as if it broke
        with pytest.raises(InputError) as err:
            index.search(queries, K)
    finally:
        index._shard = None  # already closed
        index.close()
    assert err.value.field == "candidates.qd.index"
    assert f"the Qdrant shard in {index.path} stopped answering" in str(err.value)
    assert "the rerun reuses it" in str(err.value)
    _, stats, _ = _built(options, docs, queries)
    assert stats["reused"] and stats["points"] == len(docs.ids)
