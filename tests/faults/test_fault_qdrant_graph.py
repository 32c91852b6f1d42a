"""Fault class "an index run that was a full scan" (issue 32): Qdrant's ``hnsw_config.m:
0`` builds no HNSW graph (Qdrant's switch for per-tenant graphs only), so every search
scans every point, yet the shard still counts every vector as indexed. The proof read
that count and recorded an HNSW run (``exact: false``), so a candidate searched
exhaustively was judged and reported as an approximate index. It is recorded as a full
scan, and a sweep of ``hnsw_ef`` over such a shard (every value the same search) is
refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from faultkit import no_traceback, run_cli, write_recipe

from evalq.retrieve.kinds import Documents, Queries
from evalq.retrieve.qdrant_options import QdrantOptions
from evalq.retrieve.registry import INDEX_KINDS


def _unit(n: int, seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal((n, 32)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.mark.server
def test_a_shard_without_a_graph_is_proved_a_full_scan(tmp_path: Path) -> None:
    docs = Documents(ids=tuple(f"d{i}" for i in range(1500)), vectors=_unit(1500, 0))
    queries = Queries(ids=tuple(f"q{i}" for i in range(20)), vectors=_unit(20, 1))
    truth = np.argsort(-(queries.vectors @ docs.vectors.T), axis=1)[:, :10]
    proofs, recall = {}, {}
    for m in (0, 4):  # hnsw_ef 1: a graph search finds few of the true top 10
        options = QdrantOptions(path=str(tmp_path), hnsw_config={"m": m, "ef_construct": 8},
                                search_params={"hnsw_ef": 1})
        index = INDEX_KINDS.build(options, docs, where="candidates.q.index")
        try:
            found = np.asarray(index.search(queries, 10).indices)
            proofs[m] = index.proof()
        finally:
            index.close()
        recall[m] = np.mean([len(set(f) & set(t)) / 10 for f, t in zip(found, truth)])
    assert recall[0] == 1.0 and recall[4] < 0.9  # m: 0 searched every point
    assert proofs[0].exact and proofs[0].method == "full scan"
    assert proofs[0].params["hnsw_graph"] is False
    assert not proofs[4].exact and proofs[4].method == "HNSW"


def test_a_sweep_of_hnsw_ef_without_a_graph_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    index = {"kind": "qdrant", "hnsw_config": {"m": 0}, "sweep": {"hnsw_ef": [8, 16]}}
    path = write_recipe(tmp_path, candidates=[{"name": "q", "index": index}])
    result = run_cli(capsys, "validate", str(path))
    assert result.code == 2, result.err
    assert no_traceback(result.err) and "candidates.0.index" in result.err
    assert "no HNSW graph" in result.err and "Fix:" in result.err
