"""Exact search over a corpus held as shards, merged in trec_eval's order.

A corpus whose vectors do not fit in memory is stored as shards (``.npy`` files,
memory-mapped, :mod:`evalq.data.vectors`). Each shard is searched exactly on its own, one
at a time, and the per-shard top-k lists are merged into a running top-k per query.

Why the merge is exact, ties included: :func:`evalq.retrieve.search` orders rows by (score desc,
document id desc) and resolves ties *at the depth boundary* exactly, so each shard's
list is precisely the first ``k`` of that shard's documents in trec_eval's order. The
first ``k`` of the whole collection in that order are each among the first ``k`` of their
own shard, so they are all in the union of the shard lists, and ordering the union by
the same key (with the *global* id ranks) picks the same ``k`` rows with the same scores
that one flat index over all vectors returns. Scores are FAISS's float32 inner products
of the same two vectors, so the run is the same bit for bit (tested against
:func:`evalq.retrieve.search.search`, with ties spanning shards and the boundary).

Memory: one shard's FAISS index (a copy of its vectors) plus ``queries × k`` results at a
time; the other shards stay on disk, and a memory-mapped shard's pages are released from
the resident set once it is searched (:func:`evalq.data.vectors.release_pages`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evalq.core.ranking import Ranking
from evalq.data.vectors import release_pages
from evalq.retrieve.search import exact_topk, float_index, id_ranks, order_topk


@dataclass(frozen=True)
class ShardSearchStats:
    shards: int
    documents: int
    largest_shard: int


def search_shards(
    query_vectors: np.ndarray,
    shards: Sequence[np.ndarray],
    doc_ids: Sequence[str],
    query_ids: Sequence[str],
    depth: int,
    *,
    query_chunk: int = 1024,
) -> Ranking:
    """Top ``depth`` documents per query over ``shards`` (row blocks of the corpus, in
    ``doc_ids`` order); float vectors, exact inner product. The same :class:`Ranking` as
    ``search(query_vectors, np.concatenate(shards), doc_ids, query_ids, depth)``."""
    queries = np.ascontiguousarray(query_vectors, dtype=np.float32)
    doc_ids, query_ids = tuple(doc_ids), tuple(query_ids)
    sizes = [int(s.shape[0]) for s in shards]
    n_docs = sum(sizes)
    if n_docs != len(doc_ids):
        raise ValueError(f"{n_docs} document vectors in the shards for {len(doc_ids)} ids")
    if queries.ndim != 2 or queries.shape[0] != len(query_ids):
        raise ValueError(f"query vectors of shape {queries.shape} for {len(query_ids)} ids")
    if len(set(doc_ids)) != len(doc_ids):
        raise ValueError("document ids must be unique (trec_eval breaks ties by id)")
    if depth < 1 or query_chunk < 1:
        raise ValueError("depth and query_chunk must be at least 1")
    for s in shards:
        if s.ndim != 2 or (len(queries) and s.shape[0] and s.shape[1] != queries.shape[1]):
            raise ValueError(f"a shard of shape {s.shape} does not match the queries' width")

    n_q = queries.shape[0]
    indices = np.full((n_q, depth), -1, dtype=np.int64)
    scores = np.full((n_q, depth), np.nan, dtype=np.float64)
    if n_docs == 0 or n_q == 0:
        return Ranking.from_search(query_ids, doc_ids, indices, scores)
    tie_key = id_ranks(doc_ids)
    k = min(depth, n_docs)
    best_sc: np.ndarray | None = None
    best_idx: np.ndarray | None = None
    offset = 0
    for shard, size in zip(shards, sizes):
        if size == 0:
            continue
        local_key = tie_key[offset : offset + size]
        index = float_index(np.ascontiguousarray(shard, dtype=np.float32))
        k_shard = min(k, size)
        sc = np.empty((n_q, k_shard), dtype=np.float64)
        idx = np.empty((n_q, k_shard), dtype=np.int64)
        for start in range(0, n_q, query_chunk):
            rows = slice(start, start + query_chunk)
            sc[rows], idx[rows] = exact_topk(index, queries[rows], k_shard, size, local_key)
        idx += offset
        del index
        release_pages(shard)
        if best_sc is None or best_idx is None:
            best_sc, best_idx = sc, idx
        else:
            best_sc, best_idx = order_topk(np.concatenate([best_sc, sc], axis=1),
                                       np.concatenate([best_idx, idx], axis=1),
                                       k, tie_key)
        offset += size
    assert best_sc is not None and best_idx is not None
    indices[:, :k] = best_idx
    scores[:, :k] = best_sc
    return Ranking.from_search(query_ids, doc_ids, indices, scores)
