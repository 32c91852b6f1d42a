"""Unit vectors in tight clusters, for the index-kind tests: many near neighbours, so a
small HNSW beam or few IVF probes miss some of them and an index's loss is measurable."""

from __future__ import annotations

import numpy as np

from evalq.retrieve.kinds import Documents, Queries


def clustered(n_docs: int, dim: int, n_queries: int, *, seed: int, centres: int = 16
              ) -> tuple[Documents, Queries]:
    """``n_docs`` documents around ``centres`` random centres and ``n_queries`` queries
    that are documents moved slightly, seeded; ids ``d00000…`` and ``q0…``."""
    rng = np.random.default_rng(seed)
    middle = rng.standard_normal((centres, dim))
    docs = middle[rng.integers(0, centres, n_docs)] + 0.35 * rng.standard_normal((n_docs, dim))
    docs = (docs / np.linalg.norm(docs, axis=1, keepdims=True)).astype(np.float32)
    queries = docs[rng.choice(n_docs, n_queries, replace=False)]
    queries = queries + 0.05 * rng.standard_normal(queries.shape)
    return (Documents(tuple(f"d{i:05d}" for i in range(n_docs)), docs),
            Queries(tuple(f"q{i}" for i in range(n_queries)), queries.astype(np.float32)))
