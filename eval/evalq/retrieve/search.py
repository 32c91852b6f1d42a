"""Exact top-k search with FAISS, in trec_eval's tie order, over float or quantized vectors.

- float32: ``faiss.IndexFlatIP`` (exact inner product; cosine for normalized vectors).
- int8 (:mod:`evalq.retrieve.vectorquant`): calibrated codes of queries and documents, exact integer
  inner product (``IndexFlatIP`` over the codes as float32 — exact while
  ``dim × 128² < 2²⁴``, i.e. dim ≤ 1024, because every partial sum is an integer below
  float32's exact range; wider models get float32 rounding of the integer sums).
- binary: ``faiss.IndexBinaryFlat`` (Hamming over packed sign bits), scored as
  ``dim - 2 × hamming``.
- rescoring (``VectorSpec.rescore = r``): the quantized index returns ``depth × r``
  candidates, which are rescored with the float query against the *stored* document
  representation (dequantized int8 or ±1 signs) and cut to ``depth``.

Ties: rows are ordered by score descending, then document id descending (what trec_eval
does with equal scores), *including at the depth boundary*: FAISS keeps an arbitrary
subset of documents tied with the k-th score, so we ask it for a margin of extra results
and, for any query whose last returned score still equals its k-th, redo that query over
the whole collection. Which documents make the cut is therefore a function of the scores
and ids only, never of FAISS's heap internals or the collection order.

Queries are processed in chunks to bound memory (``chunk × k`` results; rescoring
gathers ``sub-chunk × candidates × dim`` floats at most ``_GATHER_FLOATS`` at a time).

The tie-exact core (:func:`exact_topk`, :func:`order_topk`, :func:`float_index`,
:func:`id_ranks`) is public because sharded search (:mod:`evalq.retrieve.shards`) and ANN
search (:mod:`evalq.retrieve.ann`) rank in the same order with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from evalq.core.ranking import Ranking
from evalq.retrieve.vectorquant import QuantizedDocuments, VectorSpec, quantize_documents

# (query rows, k) -> (scores (q, k) higher-is-better, indices (q, k)), ordered best first.
SearchFn = Callable[[np.ndarray, int], tuple[np.ndarray, np.ndarray]]

_GATHER_FLOATS = 1 << 23  # 32 MiB of float32 per rescoring sub-chunk


def search(
    query_vectors: np.ndarray,
    doc_vectors: np.ndarray,
    doc_ids: Sequence[str],
    query_ids: Sequence[str],
    depth: int,
    *,
    vectors: VectorSpec | None = None,
    quantized: QuantizedDocuments | None = None,
    query_chunk: int = 1024,
) -> Ranking:
    """Top ``depth`` documents per query; see the module docstring for each index type.

    ``doc_vectors`` are the float32 corpus vectors; with a quantized ``vectors`` spec they
    are quantized here (int8 calibrated on them) and only the quantized form is searched;
    a caller that also needs the stored form (its size, its drift) passes it as
    ``quantized`` (from :func:`quantize_documents` with the same spec) so it is made once.
    Queries with fewer than ``depth`` documents in the collection get empty slots.
    """
    queries = _matrix(query_vectors, "query_vectors")
    docs = _matrix(doc_vectors, "doc_vectors")
    doc_ids, query_ids = tuple(doc_ids), tuple(query_ids)
    if queries.shape[0] != len(query_ids):
        raise ValueError(f"{queries.shape[0]} query vectors for {len(query_ids)} query ids")
    if docs.shape[0] != len(doc_ids):
        raise ValueError(f"{docs.shape[0]} document vectors for {len(doc_ids)} document ids")
    if len(set(doc_ids)) != len(doc_ids):
        raise ValueError("document ids must be unique (trec_eval breaks ties by id)")
    if queries.shape[0] and docs.shape[0] and queries.shape[1] != docs.shape[1]:
        raise ValueError(
            f"query vectors are {queries.shape[1]} wide, document vectors {docs.shape[1]}"
        )
    if depth < 1 or query_chunk < 1:
        raise ValueError("depth and query_chunk must be at least 1")
    spec = vectors or VectorSpec()

    n_docs = docs.shape[0]
    indices = np.full((queries.shape[0], depth), -1, dtype=np.int64)
    scores = np.full((queries.shape[0], depth), np.nan, dtype=np.float64)
    if n_docs == 0 or queries.shape[0] == 0:
        return Ranking.from_search(query_ids, doc_ids, indices, scores)

    tie_key = id_ranks(doc_ids)
    k = min(depth, n_docs)
    if spec.quantize == "none":
        first_stage, stored = float_index(docs), None
    else:
        stored = quantized if quantized is not None else quantize_documents(docs, spec)
        del docs  # from here on only what a deployment stores is searched
        if spec.queries == "float":  # asymmetric: the float query · what is stored
            first_stage = float_index(stored.stored_vectors(np.arange(n_docs)))
            stored = None
        else:
            first_stage = _quantized_index(stored)

    for start in range(0, queries.shape[0], query_chunk):
        rows = slice(start, start + query_chunk)
        chunk = queries[rows]
        probe = chunk if stored is None else stored.query_codes(chunk)
        if stored is not None and spec.rescore is not None:
            n_candidates = min(n_docs, k * spec.rescore)
            _, cand_idx = exact_topk(first_stage, probe, n_candidates, n_docs, tie_key)
            top_sc, top_idx = _rescore(chunk, stored, cand_idx, k, tie_key)
        else:
            top_sc, top_idx = exact_topk(first_stage, probe, k, n_docs, tie_key)
        indices[rows, :k] = top_idx
        scores[rows, :k] = top_sc
    return Ranking.from_search(query_ids, doc_ids, indices, scores)


def exact_topk(
    search_fn: SearchFn, probe: np.ndarray, k: int, n_docs: int, tie_key: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` by (score desc, id desc), exact at the boundary; float64 scores."""
    margin = min(n_docs, k + max(8, k // 4))
    sc, idx = search_fn(probe, margin)
    out_sc = np.empty((probe.shape[0], k), dtype=np.float64)
    out_idx = np.empty((probe.shape[0], k), dtype=np.int64)
    redo = (sc[:, -1] == sc[:, k - 1]) if margin < n_docs else np.zeros(len(sc), dtype=bool)
    keep = ~redo
    out_sc[keep], out_idx[keep] = order_topk(sc[keep], idx[keep], k, tie_key)
    if redo.any():
        full_sc, full_idx = search_fn(probe[redo], n_docs)
        out_sc[redo], out_idx[redo] = order_topk(full_sc, full_idx, k, tie_key)
    return out_sc, out_idx


def order_topk(
    sc: np.ndarray, idx: np.ndarray, k: int, tie_key: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Sort each row by score desc then document id desc; keep the first ``k``."""
    sc = sc.astype(np.float64)
    order = np.lexsort((-tie_key[idx], -sc), axis=-1)[:, :k]
    return np.take_along_axis(sc, order, axis=1), np.take_along_axis(idx, order, axis=1)


def _rescore(
    queries: np.ndarray, stored: QuantizedDocuments, candidates: np.ndarray, k: int,
    tie_key: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Float query · stored document for each candidate, then the top ``k``."""
    n_q, n_c = candidates.shape
    rescored = np.empty((n_q, n_c), dtype=np.float32)
    step = max(1, _GATHER_FLOATS // max(1, n_c * stored.dim))
    for start in range(0, n_q, step):
        part = slice(start, start + step)
        docs = stored.stored_vectors(candidates[part])  # (q, c, dim)
        rescored[part] = np.einsum("qd,qcd->qc", queries[part], docs)
    return order_topk(rescored, candidates, k, tie_key)


def float_index(docs: np.ndarray) -> SearchFn:
    import faiss

    index = faiss.IndexFlatIP(docs.shape[1])
    index.add(docs)

    def run(probe: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        sc, idx = index.search(np.ascontiguousarray(probe, dtype=np.float32), k)
        return sc, idx

    return run


def _quantized_index(stored: QuantizedDocuments) -> SearchFn:
    import faiss

    if stored.spec.quantize == "int8":
        index = faiss.IndexFlatIP(stored.dim)
        index.add(stored.codes.astype(np.float32))

        def run_int8(probe: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
            return index.search(np.ascontiguousarray(probe, dtype=np.float32), k)

        return run_int8

    binary = faiss.IndexBinaryFlat(stored.codes.shape[1] * 8)
    binary.add(np.ascontiguousarray(stored.codes))
    dim = stored.dim

    def run_binary(probe: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        hamming, idx = binary.search(np.ascontiguousarray(probe), k)
        return (dim - 2 * hamming.astype(np.int64)).astype(np.float64), idx

    return run_binary


def id_ranks(doc_ids: tuple[str, ...]) -> np.ndarray:
    """Rank of each id in ascending string order (Python's order = UTF-8 byte order)."""
    order = sorted(range(len(doc_ids)), key=doc_ids.__getitem__)
    ranks = np.empty(len(doc_ids), dtype=np.int64)
    ranks[np.asarray(order, dtype=np.int64)] = np.arange(len(doc_ids), dtype=np.int64)
    return ranks


def _matrix(vectors: np.ndarray, name: str) -> np.ndarray:
    array = np.ascontiguousarray(vectors, dtype=np.float32)
    if array.ndim != 2:
        raise ValueError(f"{name} must be a (n, dim) matrix, got shape {array.shape}")
    return array
