"""The ``faiss`` retrieval kind: approximate (ANN) search with a FAISS ``index_factory``
index, judged against exact search.

A deployment rarely searches exactly: it runs HNSW, IVF-PQ or a scalar-quantized IVF.
What a quantized model "loses" in production is therefore two losses stacked: the
model's (its exact ranking vs the reference's) and the index's (its ANN ranking vs the
exact ranking of the *same* vectors). :class:`FaissIndex` (the kind's
:class:`~evalq.retrieve.kinds.Index`) builds the variant's index over its document vectors
and searches it with :class:`FaissSearch` parameters (one build serves a sweep of
``efSearch`` / ``nprobe``); its :meth:`~FaissIndex.proof` reads back the parameters in
effect. :func:`evalq.retrieve.kinds.index_report` then records what it costs (build
seconds, bytes, queries/s), how much of the exact top-k it keeps (recall@k against exact
search of the same vectors), and splits each metric's drop into quantization loss and
index loss.

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

import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, SerializerFunctionWrapHandler, field_validator, model_serializer

from evalq.core.errors import InputError
from evalq.core.options import StrictOptions
from evalq.core.ranking import Ranking
from evalq.retrieve.kinds import (
    Documents,
    IndexProof,
    IndexStats,
    KindOptions,
    KindSpec,
    Queries,
    SweepOptions,
)
from evalq.retrieve.search import id_ranks, order_topk

# Rows of the corpus used for training when the recipe does not say: FAISS wants at
# least 39 points per centroid and warns past 256 per centroid; 256 × 4096 lists covers
# the IVF sizes we document while capping the k-means cost.
_DEFAULT_TRAIN = 256 * 4096
_INT32 = 2**31 - 1  # FAISS takes these counts as a C int
_FACTORY = re.compile(r"^[A-Za-z0-9_,.=+\-x]+$")


class FaissSearch(StrictOptions):
    """FAISS search-time parameters, passed through ``ParameterSpace``
    (``efSearch=64,nprobe=16``). Only names FAISS understands for the index families we
    document, so a typo is refused with a did-you-mean. Lists to probe and the HNSW beam
    width are counts of at least 1; ``max_codes`` and ``ht`` are limits where 0 means
    none; ``k_factor`` multiplies k."""

    efSearch: int | None = Field(default=None, ge=1, le=_INT32)
    nprobe: int | None = Field(default=None, ge=1, le=_INT32)
    max_codes: int | None = Field(default=None, ge=0, le=_INT32)
    ht: int | None = Field(default=None, ge=0, le=_INT32)
    k_factor: float | None = Field(default=None, gt=0, allow_inf_nan=False)

    @model_serializer(mode="wrap")
    def _set_only(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # The parameters set, as the recipe wrote them (the manifest's recipe echoes it).
        return {k: v for k, v in handler(self).items() if v is not None}

    def values(self) -> dict[str, int | float]:
        """The parameters set, by name (what the manifest's ``search`` records)."""
        return self.model_dump(exclude_none=True)

    def string(self) -> str:
        """The ParameterSpace string, in a fixed order (what the manifest records)."""
        values = self.values()
        return ",".join(f"{k}={values[k]}" for k in sorted(values))


class FaissSweep(SweepOptions):
    """``sweep:`` of a FAISS index: ``efSearch`` (HNSW) or ``nprobe`` (IVF), FAISS's
    search parameters (``search:``), set on the one built index before each search."""

    TARGETS: ClassVar[dict[str, tuple[str, ...]]] = {
        "efSearch": ("search", "efSearch"), "nprobe": ("search", "nprobe")}
    BUILD_TIME: ClassVar[tuple[str, ...]] = ("factory", "train_size", "seed",
                                             "deterministic")

    efSearch: list[int] | None = None
    nprobe: list[int] | None = None


class FaissOptions(KindOptions):
    """``index: {kind: faiss, ...}`` of a variant: the deployment's FAISS ANN index
    (``kind`` may be left out: an ``index:`` without it is this kind).

    ``factory`` is a FAISS ``index_factory`` string (``Flat``, ``HNSW32``, ``IVF1024,PQ32``,
    ``IVF4096,SQ8``, ``OPQ16,IVF256,PQ16``); the metric is always inner product.
    ``train_size`` rows (a seeded sample of the corpus) train the indexes that need it;
    ``search`` sets FAISS search parameters (``efSearch``, ``nprobe``...).
    ``deterministic`` builds with one thread: HNSW insertion in parallel depends on thread
    timing, so two runs would otherwise judge two different graphs.
    """

    kind: Literal["faiss"] = "faiss"
    factory: str = Field(min_length=1)
    train_size: int | None = Field(default=None, ge=1)
    search: FaissSearch = FaissSearch()
    seed: int = 0
    deterministic: bool = True
    sweep: FaissSweep | None = None

    @field_validator("factory")
    @classmethod
    def _factory_syntax(cls, value: str) -> str:
        if not _FACTORY.match(value):
            raise ValueError(f"index factory {value!r} is not a FAISS index_factory string "
                             "(e.g. Flat, HNSW32, IVF1024,PQ32, IVF4096,SQ8)")
        return value

    def search_string(self) -> str:
        return self.search.string()

    def record(self) -> dict[str, Any]:
        return {"factory": self.factory, "train_size": self.train_size,
                "search": self.search.values(), "seed": self.seed,
                "deterministic": self.deterministic}

    def search_options(self) -> FaissSearch:
        return self.search

    def check_width(self, dim: int, where: str) -> None:
        """FAISS builds the empty index (cheap: no training, no vectors), so a factory it
        refuses for this width (``PQ48`` over 384 dims is fine, ``PQ50`` is not) is
        exit 2 at plan time."""
        _new_index(dim, self, where)


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


class FaissIndex:
    """A FAISS ``index_factory`` index over document vectors (the ``faiss`` kind): trained
    on a seeded sample at the first :meth:`add`, searched with ``FaissSearch`` parameters.
    ``where`` names the recipe field in errors (a factory FAISS refuses, a corpus too small
    to train it): those are recipe problems, exit 2."""

    def __init__(self, options: FaissOptions, where: str = "index") -> None:
        self.options, self.where = options, where
        self._index: Any = None
        self._ids: tuple[str, ...] = ()
        self._train_rows, self._train_s, self._add_s = 0, 0.0, 0.0
        self._search_s, self._queries, self._missing = 0.0, 0, 0
        self._params = FaissSearch()

    def add(self, docs: Documents) -> None:
        if docs.vectors is None:
            raise ValueError("a FAISS index is built from vectors; these documents have none")
        vectors = np.ascontiguousarray(docs.vectors, dtype=np.float32)
        if self._index is None:
            self._index = _new_index(vectors.shape[1], self.options, self.where)
        train_rows, (t0, t1, t2) = _train_and_add(self._index, vectors, self.options,
                                                  self.where)
        self._train_rows += train_rows
        self._train_s += t1 - t0
        self._add_s += t2 - t1
        self._ids = (*self._ids, *docs.ids)

    def search(self, queries: Queries, depth: int, params: Any = None) -> Ranking:
        vectors, k = self._prepare(queries, depth, params)
        began = time.perf_counter()
        scores, indices = self._index.search(vectors, k) if len(vectors) else (
            np.zeros((0, k), np.float32), np.zeros((0, k), np.int64))
        self._search_s, self._queries = time.perf_counter() - began, len(vectors)
        return self._ranking(queries, scores, indices, depth)

    def search_timed(self, queries: Queries, depth: int, params: Any
                     ) -> tuple[Ranking, np.ndarray]:
        """:meth:`search` at ``params`` one query at a time, with each query's seconds
        (a batched search spreads a batch over threads and hides single-query latency);
        the parameters are set once, before the clock starts."""
        vectors, k = self._prepare(queries, depth, params)
        seconds = np.zeros(len(vectors), dtype=np.float64)
        scores = np.zeros((len(vectors), k), np.float32)
        indices = np.zeros((len(vectors), k), np.int64)
        for row in range(len(vectors)):
            began = time.perf_counter()
            scores[row:row + 1], indices[row:row + 1] = self._index.search(
                vectors[row:row + 1], k)
            seconds[row] = time.perf_counter() - began
        self._search_s, self._queries = float(seconds.sum()), len(vectors)
        return self._ranking(queries, scores, indices, depth), seconds

    def _prepare(self, queries: Queries, depth: int, params: Any) -> tuple[np.ndarray, int]:
        """The search parameters set on the index (``params``, else the options' own), and
        the query vectors and the ``k`` to ask FAISS for: what both searches do before the
        clock starts."""
        if queries.vectors is None:
            raise ValueError("a FAISS index is searched with query vectors; these have none")
        wanted = params if params is not None else self.options.search
        if wanted.values():
            _set_search_parameters(self._index, self.options.factory, wanted, self.where)
        self._params = wanted
        vectors = np.ascontiguousarray(queries.vectors, dtype=np.float32)
        return vectors, min(depth, len(self._ids))

    def _ranking(self, queries: Queries, scores: np.ndarray, indices: np.ndarray,
                 depth: int) -> Ranking:
        """FAISS's answer in trec_eval's order; counts the slots FAISS left empty."""
        ranked_idx, ranked_sc, self._missing = _trec_order(scores, indices, depth,
                                                           id_ranks(self._ids))
        return Ranking.from_search(queries.ids, self._ids, ranked_idx, ranked_sc)

    def cost(self) -> IndexCost:
        """Build and last-search costs (what the manifest's ``index`` entry records)."""
        import faiss

        size = int(faiss.serialize_index(self._index).nbytes)
        searched = self._search_s > 0 and self._queries
        return IndexCost(
            factory=self.options.factory, search_params=self._params.string(),
            train_rows=self._train_rows, train_s=self._train_s, add_s=self._add_s,
            build_s=self._train_s + self._add_s, bytes=size,
            bytes_per_vector=size / max(1, len(self._ids)), search_s=self._search_s,
            queries_per_s=self._queries / self._search_s if searched else None,
            missing_slots=self._missing)

    def stats(self) -> IndexStats:
        cost = self.cost()
        return IndexStats(bytes=cost.bytes, build_s=cost.build_s, documents=len(self._ids),
                          detail=asdict(cost))

    def proof(self) -> IndexProof:
        """The index's own type and the parameters it holds at search time, read back from
        FAISS (not from the recipe)."""
        import faiss

        real = faiss.downcast_index(self._index)
        params: dict[str, Any] = {"ntotal": int(real.ntotal), "dim": int(real.d)}
        hnsw = getattr(real, "hnsw", None)
        if hnsw is not None:
            params["efSearch"] = int(hnsw.efSearch)
        try:
            ivf = faiss.extract_index_ivf(self._index)
        except RuntimeError:  # not an IVF index
            ivf = None
        if ivf is not None:
            params.update(nprobe=int(ivf.nprobe), nlist=int(ivf.nlist))
        return IndexProof(kind="faiss", exact=isinstance(real, faiss.IndexFlat),
                          method=type(real).__name__, params=params)

    def close(self) -> None:
        self._index = None


def _build(options: FaissOptions, docs: Documents, where: str) -> FaissIndex:
    index = FaissIndex(options, where)
    index.add(docs)
    return index


KIND = KindSpec(name="faiss", summary="a FAISS index_factory index (HNSW, IVF, PQ, SQ), "
                "built over the variant's vectors and judged against its exact search",
                inputs="vectors", options=FaissOptions, build=_build,
                search_options=FaissSearch)


def ann_search(
    query_vectors: np.ndarray,
    doc_vectors: np.ndarray,
    doc_ids: Sequence[str],
    query_ids: Sequence[str],
    depth: int,
    spec: FaissOptions,
    *,
    where: str = "index",
) -> AnnResult:
    """Build ``spec``'s index over ``doc_vectors`` and return its top ``depth`` per query
    with what it cost."""
    index = _build(spec, Documents(tuple(doc_ids), vectors=doc_vectors), where)
    try:
        ranking = index.search(Queries(tuple(query_ids), vectors=query_vectors), depth)
        return AnnResult(ranking, index.cost())
    finally:
        index.close()


def _new_index(dim: int, spec: FaissOptions, where: str) -> Any:
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


def _train_and_add(index: Any, docs: np.ndarray, spec: FaissOptions, where: str
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


def _set_search_parameters(index: Any, factory: str, params: FaissSearch, where: str
                           ) -> None:
    """Apply ``params`` (efSearch, nprobe); one the index does not take is exit 2."""
    import faiss

    try:
        faiss.ParameterSpace().set_index_parameters(index, params.string())
    except RuntimeError as exc:
        raise InputError(
            message=f"index '{factory}' does not take search parameters "
                    f"'{params.string()}' ({_first_line(exc)})",
            field=f"{where}.search",
            fix="efSearch applies to HNSW indexes, nprobe to IVF ones",
        ) from None


def _training_sample(docs: np.ndarray, spec: FaissOptions) -> np.ndarray:
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


