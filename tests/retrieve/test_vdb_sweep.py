"""A search-time parameter swept over one real database index (issue 30): pgvector's
``ef_search`` on the session's embedded PostgreSQL, Qdrant's ``hnsw_ef`` and
``oversampling`` in Qdrant's engine (the fixtures in tests/retrieve/conftest.py, one
database per session). Each table or shard is built and loaded once, searched at every
value with the setting read back from the database, and each query timed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalq.execute.dataset_scoring import run_index
from evalq.retrieve import pg_server, pgvector_kind, qdrant_kind
from evalq.retrieve.exact import ExactOptions
from evalq.retrieve.kinds import recall_at
from evalq.retrieve.registry import INDEX_KINDS
from support.clustered import clustered

K = 10


DOCS, QUERIES = clustered(1500, 32, 30, seed=2, centres=12)


@pytest.fixture(scope="module")
def exact() -> Any:
    return run_index(ExactOptions(), DOCS, QUERIES, K, where="x").ranking


def _counted(monkeypatch: pytest.MonkeyPatch, cls: type) -> list[int]:
    adds: list[int] = []
    real = cls.add
    monkeypatch.setattr(cls, "add", lambda self, docs: (adds.append(len(docs.ids)),
                                                        real(self, docs))[1])
    return adds


def _recalls(points: Any, exact: Any) -> list[float]:
    return [float(recall_at(p.ranking, exact, K).mean()) for p in points]


@pytest.mark.server
def test_pgvector_ef_search_swept_over_one_table(pg: pg_server.Database, exact: Any,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    adds = _counted(monkeypatch, pgvector_kind.PgvectorIndex)
    options = INDEX_KINDS.parse({"kind": "pgvector", "allow_root": True, "m": 4,
                                 "ef_construction": 8, "ef_search": 40,
                                 "sweep": {"ef_search": [10, 40, 400]}}, "vectors", "faiss")
    run = run_index(options, DOCS, QUERIES, K, where="candidates.pg.index")
    assert adds == [len(DOCS.ids)]  # one COPY and one CREATE INDEX for every value
    assert run.sweep is not None
    name, points = run.sweep
    assert name == "ef_search" and [p.value for p in points] == [10, 40, 400]
    # the setting in effect, read back from the server, and an Index Scan at each value
    assert [p.proof.params["hnsw.ef_search"] for p in points] == ["10", "40", "400"]
    assert all(not p.proof.exact and p.proof.method == "Index Scan" for p in points)
    assert run.proof.params["hnsw.ef_search"] == "40"  # the variant's own search
    recalls = _recalls(points, exact)
    assert recalls[0] < 1.0 and recalls[-1] > recalls[0]
    np.testing.assert_array_equal(points[1].ranking.indices, run.ranking.indices)
    assert all(p.seconds.shape == (len(QUERIES.ids),) and (p.seconds > 0).all()
               for p in points)


@pytest.mark.server
@pytest.mark.parametrize(("extra", "sweep"), [
    ({"hnsw_config": {"m": 4, "ef_construct": 8}}, {"hnsw_ef": [4, 16, 256]}),
    ({"hnsw_config": {"m": 16, "ef_construct": 100},
      "quantization_config": {"binary": {}},
      "search_params": {"hnsw_ef": 128, "quantization": {"rescore": True}}},
     {"oversampling": [1.0, 4.0]}),
])
def test_qdrant_search_params_swept_over_one_shard(
        qdrant_root: Path, exact: Any, monkeypatch: pytest.MonkeyPatch,
        extra: dict[str, Any], sweep: dict[str, list[float]]) -> None:
    adds = _counted(monkeypatch, qdrant_kind.QdrantIndex)
    options = INDEX_KINDS.parse({"kind": "qdrant", "path": str(qdrant_root), **extra,
                                 "sweep": sweep}, "vectors", "faiss")
    run = run_index(options, DOCS, QUERIES, K, where="candidates.qd.index")
    assert adds == [len(DOCS.ids)]  # one upsert and optimize for every value
    assert run.sweep is not None
    (name, values), = sweep.items()
    assert run.sweep[0] == name and [p.value for p in run.sweep[1]] == values
    points = run.sweep[1]
    for p, value in zip(points, values):
        searched = p.proof.params["search_params"]
        got = searched.get(name, searched.get("quantization", {}).get(name))
        assert got == value and not p.proof.exact  # an HNSW search, not a full scan
        assert p.proof.params["indexed_vectors"] == len(DOCS.ids)
    recalls = _recalls(points, exact)
    assert recalls[-1] > recalls[0]
