"""Approximate (ANN) search with a FAISS ``index_factory`` index, judged against exact search.

A deployment rarely searches exactly: it runs HNSW, IVF-PQ or a scalar-quantized IVF.
What a quantized model "loses" in production is therefore two losses stacked: the
model's (its exact ranking vs the reference's) and the index's (its ANN ranking vs the
exact ranking of the *same* vectors). :func:`ann_search` builds the variant's index over
its document vectors and searches it; :func:`index_report` measures what it costs (build
seconds, bytes, queries/s) and how much of the exact top-k it keeps (recall@k against
exact search of the same vectors), and splits each metric's drop into quantization loss
and index loss.

Tie order: FAISS returns an ANN index's candidates in its own order; rows are re-sorted
by (score desc, document id desc), trec_eval's order, so the run file scores the same in
trec_eval. Ties at the depth boundary are the index's business (an ANN index does not
promise to return every document tied with its k-th), and an index may return fewer
than ``depth`` results (an IVF list too short for ``nprobe``): those slots stay empty
and count as misses, as they would in production.

Determinism: training samples ``train_size`` rows with a seeded generator, FAISS
k-means is seeded, and with ``deterministic`` the index is built with one OpenMP thread
(HNSW insertion order across threads is timing-dependent); search runs multi-threaded,
which does not change results.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from evalq.core.errors import InputError
from evalq.core.ranking import Ranking
from evalq.retrieve.options import IndexSpec
from evalq.retrieve.search import id_ranks, order_topk

# Rows of the corpus used for training when the recipe does not say: FAISS wants at
# least 39 points per centroid and warns past 256 per centroid; 256 × 4096 lists covers
# the IVF sizes we document while capping the k-means cost.
_DEFAULT_TRAIN = 256 * 4096


@dataclass(frozen=True)
class IndexCost:
    """What the index costs; ``recall`` is filled by :func:`index_report`."""

    factory: str
    search_params: str
    train_rows: int
    train_s: float
    add_s: float
    build_s: float
    bytes: int
    bytes_per_vector: float
    search_s: float
    queries_per_s: float | None
    missing_slots: int


@dataclass(frozen=True)
class AnnResult:
    ranking: Ranking
    cost: IndexCost


def ann_search(
    query_vectors: np.ndarray,
    doc_vectors: np.ndarray,
    doc_ids: Sequence[str],
    query_ids: Sequence[str],
    depth: int,
    spec: IndexSpec,
    *,
    where: str = "index",
) -> AnnResult:
    """Build ``spec``'s index over ``doc_vectors`` and return its top ``depth`` per query.

    ``where`` names the recipe field in errors (a factory FAISS refuses, a corpus too
    small to train it): those are recipe problems, exit 2.
    """
    import faiss

    docs = np.ascontiguousarray(doc_vectors, dtype=np.float32)
    queries = np.ascontiguousarray(query_vectors, dtype=np.float32)
    doc_ids, query_ids = tuple(doc_ids), tuple(query_ids)
    n_docs, dim = docs.shape
    index = _new_index(dim, spec, where)
    train_rows, (t0, t1, t2) = _train_and_add(index, docs, spec, where)
    if spec.search:
        _set_search_parameters(index, spec, where)

    k = min(depth, n_docs)
    t3 = time.perf_counter()
    scores, indices = index.search(queries, k) if len(queries) else (
        np.zeros((0, k), np.float32), np.zeros((0, k), np.int64))
    search_s = time.perf_counter() - t3
    ranked_idx, ranked_sc, missing = _trec_order(scores, indices, depth, id_ranks(doc_ids))
    size = int(faiss.serialize_index(index).nbytes)
    cost = IndexCost(
        factory=spec.factory, search_params=spec.search_string(), train_rows=train_rows,
        train_s=t1 - t0, add_s=t2 - t1, build_s=t2 - t0, bytes=size,
        bytes_per_vector=size / max(1, n_docs), search_s=search_s,
        queries_per_s=len(queries) / search_s if search_s > 0 and len(queries) else None,
        missing_slots=missing,
    )
    return AnnResult(Ranking.from_search(query_ids, doc_ids, ranked_idx, ranked_sc), cost)


def _new_index(dim: int, spec: IndexSpec, where: str) -> Any:
    """The empty FAISS index ``spec.factory`` names; a factory FAISS refuses is exit 2."""
    import faiss

    try:
        return faiss.index_factory(dim, spec.factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as exc:
        raise InputError(
            message=f"FAISS cannot build index '{spec.factory}' for {dim}-wide vectors "
                    f"({_first_line(exc)})",
            field=f"{where}.factory",
            fix="use an index_factory string FAISS accepts for this width, e.g. HNSW32, "
                f"IVF256,PQ{_pq_hint(dim)}, IVF256,SQ8",
        ) from None


def _train_and_add(index: Any, docs: np.ndarray, spec: IndexSpec, where: str
                   ) -> tuple[int, tuple[float, float, float]]:
    """Train (on a seeded sample) and fill ``index``; the training rows and the clock at
    the start, after training and after adding. With ``deterministic`` this runs on one
    OpenMP thread; the caller's thread count is restored either way."""
    import faiss

    n_docs = len(docs)
    threads = faiss.omp_get_max_threads()
    train_rows = 0
    t0 = time.perf_counter()
    try:
        if spec.deterministic:
            faiss.omp_set_num_threads(1)
        if not index.is_trained:
            sample = _training_sample(docs, spec)
            train_rows = len(sample)
            try:
                index.train(sample)
            except RuntimeError as exc:
                raise InputError(
                    message=f"training index '{spec.factory}' on {train_rows} of {n_docs} "
                            f"documents failed ({_first_line(exc)})",
                    field=f"{where}.train_size",
                    fix="use fewer IVF lists / PQ centroids for a corpus this small (FAISS "
                        "needs at least one training point per centroid, ideally 39), or "
                        "raise train_size",
                ) from None
        t1 = time.perf_counter()
        index.add(docs)
        t2 = time.perf_counter()
    finally:
        faiss.omp_set_num_threads(threads)
    return train_rows, (t0, t1, t2)


def _set_search_parameters(index: Any, spec: IndexSpec, where: str) -> None:
    """Apply ``spec.search`` (efSearch, nprobe); one the index does not take is exit 2."""
    import faiss

    try:
        faiss.ParameterSpace().set_index_parameters(index, spec.search_string())
    except RuntimeError as exc:
        raise InputError(
            message=f"index '{spec.factory}' does not take search parameters "
                    f"'{spec.search_string()}' ({_first_line(exc)})",
            field=f"{where}.search",
            fix="efSearch applies to HNSW indexes, nprobe to IVF ones",
        ) from None


def recall_at(ann: Ranking, exact: Ranking, k: int) -> np.ndarray:
    """Per query: share of the exact top-``k`` that the ANN top-``k`` also returns."""
    if ann.query_ids != exact.query_ids:
        raise ValueError("the two rankings must cover the same queries in the same order")
    k = min(k, exact.depth, ann.depth)
    out = np.zeros(len(exact.query_ids), dtype=np.float64)
    for row in range(len(out)):
        truth = exact.indices[row, :k]
        truth = truth[truth >= 0]
        if len(truth) == 0:
            out[row] = 1.0
            continue
        out[row] = np.isin(truth, ann.indices[row, :k]).sum() / len(truth)
    return out


def index_report(
    cost: IndexCost, spec: IndexSpec, ann: Ranking, exact: Ranking,
    metrics: dict[str, dict[str, float | None]], *, ks: Sequence[int] = (10, 100),
) -> dict[str, Any]:
    """The manifest's ``index`` entry of an ANN variant.

    ``metrics`` maps a measure to ``{"reference": mean of the reference's exact run,
    "exact": this variant's exact run, "ann": this variant's ANN run}``;
    quantization loss = reference − exact, index loss = exact − ann (positive = worse,
    for measures where higher is better).
    """
    recall = {f"recall@{k}": float(recall_at(ann, exact, k).mean()) if len(exact.query_ids)
              else None for k in ks if k <= exact.depth}
    split = {}
    for name, m in metrics.items():
        ref, ex, an = m.get("reference"), m.get("exact"), m.get("ann")
        split[name] = {**m,
                       "quantization_loss": None if ref is None or ex is None else ref - ex,
                       "index_loss": None if ex is None or an is None else ex - an}
    return {"type": "ann", "factory": spec.factory, "train_size": spec.train_size,
            "search": dict(spec.search), "seed": spec.seed,
            "deterministic": spec.deterministic, **asdict(cost), **recall,
            "loss": split}


def _training_sample(docs: np.ndarray, spec: IndexSpec) -> np.ndarray:
    n = len(docs)
    want = min(n, spec.train_size or _DEFAULT_TRAIN)
    if want >= n:
        return docs
    rows = np.sort(np.random.default_rng(spec.seed).choice(n, size=want, replace=False))
    return np.ascontiguousarray(docs[rows])


def _trec_order(
    scores: np.ndarray, indices: np.ndarray, depth: int, tie_key: np.ndarray
) -> tuple[np.ndarray, np.ndarray, int]:
    """Rows by (score desc, id desc), empty slots (FAISS's -1) last; padded to ``depth``."""
    n_q, k = indices.shape
    out_idx = np.full((n_q, depth), -1, dtype=np.int64)
    out_sc = np.full((n_q, depth), np.nan, dtype=np.float64)
    missing = int((indices < 0).sum()) + n_q * (depth - k)
    if n_q == 0 or k == 0:
        return out_idx, out_sc, missing
    valid = indices >= 0
    if valid.all():
        sc, idx = order_topk(scores, indices, k, tie_key)
        out_idx[:, :k], out_sc[:, :k] = idx, sc
        return out_idx, out_sc, missing
    for row in range(n_q):
        keep = valid[row]
        if not keep.any():
            continue
        sc, idx = order_topk(scores[row : row + 1, keep], indices[row : row + 1, keep],
                         int(keep.sum()), tie_key)
        out_idx[row, : idx.shape[1]], out_sc[row, : idx.shape[1]] = idx[0], sc[0]
    return out_idx, out_sc, missing


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    useful = [line for line in lines if "Error" in line or "error" in line]
    return (useful or lines or [type(exc).__name__])[-1][:200]


def _pq_hint(dim: int) -> int:
    for m in (64, 48, 32, 24, 16, 12, 8, 4):
        if dim % m == 0:
            return m
    return 1


