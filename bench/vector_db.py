"""Vector databases against FAISS: recall@10 and queries/s at each HNSW beam width.

    python bench/vector_db.py                        # 5,000 clustered 384-d vectors
    python bench/vector_db.py --docs 2000 --dim 128 --ef 10,40,160

One run, one synthetic set (unit vectors in tight clusters, seeded; queries are perturbed
documents), three HNSW indexes built once each with the same graph parameters (m 16,
ef_construction 64): FAISS ``IndexHNSWFlat`` (the ``faiss`` kind), pgvector on the
embedded PostgreSQL (``kind: pgvector``) and Qdrant's engine in-process
(``kind: qdrant``). Each is searched at every ``--ef`` (FAISS ``efSearch``, pgvector
``hnsw.ef_search``, Qdrant ``hnsw_ef``) through evalq's index protocol, so the figures are
what a recipe's run measures; recall@10 is against exact FAISS search of the same vectors.
Each index is built once and swept over ``--ef`` by the path a recipe's ``sweep:`` takes
(:func:`evalq.retrieve.sweep.sweep_index`): one query at a time (a database round trip
each; FAISS is called once per query too), each timed by the index around its own search
call (pgvector's EXPLAIN, run for the proof, and the settings' SET are outside it), so
queries/s and p50 / p99 per query are what a recipe's sweep records. Each index's proof is
checked: a database search that did not go through its index stops the script (exit 1).

As root, the embedded PostgreSQL needs ``EVALQ_PGVECTOR_ALLOW_ROOT=1`` (``make bench`` sets
it; docs/vector-databases.md says what it changes on the host). The record
(``vector_db``) names the host; the ratios are each database's queries/s over
FAISS HNSW's at the same ``ef``.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

from evalq.retrieve.exact import ExactOptions
from evalq.retrieve.kinds import Documents, Queries, recall_at
from evalq.retrieve.registry import INDEX_KINDS
from evalq.retrieve.sweep import sweep_index
from record import host, write_record

K = 10


def clustered(n_docs: int, dim: int, n_queries: int, seed: int = 0
              ) -> tuple[Documents, Queries]:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((max(8, n_docs // 200), dim))
    docs = centres[rng.integers(0, len(centres), n_docs)]
    docs = docs + 0.35 * rng.standard_normal((n_docs, dim))
    docs = (docs / np.linalg.norm(docs, axis=1, keepdims=True)).astype(np.float32)
    queries = docs[rng.choice(n_docs, n_queries, replace=False)]
    queries = queries + 0.05 * rng.standard_normal(queries.shape)
    return (Documents(tuple(f"d{i:07d}" for i in range(n_docs)), docs),
            Queries(tuple(f"q{i}" for i in range(n_queries)), queries.astype(np.float32)))


def systems(m: int, ef_construction: int) -> dict[str, tuple[dict[str, Any], str]]:
    """name -> (recipe's index mapping, the name of its HNSW beam width to sweep)."""
    return {
        "faiss-hnsw": ({"kind": "faiss", "factory": f"HNSW{m}"}, "efSearch"),
        "pgvector-hnsw": ({"kind": "pgvector", "m": m, "ef_construction": ef_construction},
                          "ef_search"),
        "qdrant-hnsw": ({"kind": "qdrant", "hnsw_config": {"m": m,
                                                          "ef_construct": ef_construction}},
                        "hnsw_ef"),
    }


def measure(name: str, index_map: dict[str, Any], parameter: str, docs: Documents,
            queries: Queries, exact: Any, efs: list[int]) -> dict[str, Any]:
    """One build, swept over ``efs`` by the recipe's own path (``sweep:`` through
    :func:`evalq.retrieve.sweep.sweep_index`): each query searched and timed alone."""
    options = INDEX_KINDS.parse({**index_map, "sweep": {parameter: efs}}, "vectors", "faiss")
    began = time.perf_counter()
    index = INDEX_KINDS.build(options, docs, where=name)
    build_s = time.perf_counter() - began
    out: dict[str, Any] = {"build_s": build_s, "ef": {}}
    try:
        swept = sweep_index(index, options, queries, K)
        assert swept is not None
        for point in swept[1]:
            if point.proof.exact:
                sys.exit(f"{name} at ef {point.value} did not search its index: "
                         f"{point.proof}")
            out["ef"][point.value] = {
                "recall@10": float(recall_at(point.ranking, exact, K).mean()),
                **point.latency(), "proof": point.proof.method}
        out["bytes"] = index.stats().bytes
    finally:
        index.close()
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--docs", type=int, default=5000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--ef", default="10,20,40,80,160", help="strictly increasing")
    p.add_argument("--m", type=int, default=16)
    p.add_argument("--ef-construction", type=int, default=64)
    args = p.parse_args()
    efs = [int(x) for x in args.ef.split(",")]
    docs, queries = clustered(args.docs, args.dim, args.queries)
    exact_index = INDEX_KINDS.build(ExactOptions(), docs, where="exact")
    exact = exact_index.search(queries, K)
    exact_index.close()
    results = {name: measure(name, index_map, parameter, docs, queries, exact, efs)
               for name, (index_map, parameter) in systems(args.m,
                                                           args.ef_construction).items()}
    print(f"{'ef':>5} " + " ".join(f"{n + ' R@10':>20} {'q/s':>8}" for n in results))
    for ef in efs:
        print(f"{ef:>5} " + " ".join(f"{r['ef'][ef]['recall@10']:>20.4f} "
                                     f"{r['ef'][ef]['queries_per_s']:>8.0f}"
                                     for r in results.values()))
    faiss = results["faiss-hnsw"]["ef"]
    ratios = {f"{name}/faiss-hnsw qps at ef {ef}":
              r["ef"][ef]["queries_per_s"] / faiss[ef]["queries_per_s"]
              for name, r in results.items() if name != "faiss-hnsw" for ef in efs}
    write_record("vector_db", figures={"docs": args.docs, "dim": args.dim,
                                       "queries": args.queries, "m": args.m,
                                       "ef_construction": args.ef_construction,
                                       "systems": results},
                 ratios=ratios, peer="FAISS IndexHNSWFlat (evalq's faiss kind), same "
                 "vectors, same m, one query per call", host_info=host(peak=False),
                 notes="FAISS's HNSW factory builds with its own efConstruction (40); "
                       "pgvector and Qdrant with ef_construction 64.")


if __name__ == "__main__":
    main()
