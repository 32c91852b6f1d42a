"""The ``qdrant`` retrieval kind: the variant's vectors in a Qdrant shard, searched by
Qdrant's own engine in-process (qdrant-edge-py), with Qdrant's option names.

Qdrant adds two losses a FAISS pass does not see: its HNSW graph (``hnsw_config``,
searched with ``search_params.hnsw_ef``) and its vector quantization
(``quantization_config``: scalar int8, binary 1 / 1.5 / 2 bits, product), softened by
``search_params.quantization`` (``oversampling``, ``rescore``).

The trap: Qdrant indexes a segment only once its vectors pass ``indexing_threshold``
(KB), and searches a segment smaller than ``full_scan_threshold`` (KB) exhaustively even
when it has a graph. With Qdrant's defaults (10000 KB each) a test-sized collection is
never indexed, and every search is silently exact. This kind lowers both (1 KB, so any
collection is indexed, as a production-sized one would be) and calls ``optimize()``
after loading; the proof reads back from the shard how many vectors are indexed, and a
search that was exhaustive (``exact: true``, nothing indexed, or a collection under
``full_scan_threshold``) is recorded as exact, never as an index run.

A Qdrant server by ``url:`` (qdrant-client) is not part of this kind yet.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, model_validator

from evalq.core.errors import InputError, MissingExtraError
from evalq.core.options import StrictOptions
from evalq.core.ranking import Ranking
from evalq.retrieve import folders, keyed, kinds, workers
from evalq.retrieve.kinds import (
    Documents,
    IndexProof,
    IndexStats,
    KindOptions,
    KindSpec,
    Queries,
    SweepOptions,
)

_UPSERT_BATCH = 1024  # points per upsert
_LOWER_IS_BETTER = {"Euclid", "Manhattan"}  # Qdrant returns these as distances
# the options that shape a stored shard (its key); search_params are searched at any value
_BUILD_OPTIONS = ("distance", "hnsw_config", "optimizers_config", "quantization_config")


class HnswConfig(StrictOptions):
    """Qdrant's ``hnsw_config`` (``full_scan_threshold`` defaults to 1 KB here, not
    Qdrant's 10000: see the module's note on the trap)."""

    m: int = Field(default=16, ge=0)
    ef_construct: int = Field(default=100, ge=4)
    full_scan_threshold: int = Field(default=1, ge=0)


class OptimizersConfig(StrictOptions):
    """Qdrant's ``optimizers_config``: the segment size (KB) above which it builds the
    index (1 here, so a small collection is indexed; Qdrant's default is 10000)."""

    indexing_threshold: int = Field(default=1, ge=1)


class ScalarQuantization(StrictOptions):
    type: Literal["int8"] = "int8"
    quantile: float | None = Field(default=None, gt=0.5, le=1.0)


class BinaryQuantization(StrictOptions):
    encoding: Literal["one_bit", "one_and_half_bits", "two_bits"] = "one_bit"


class ProductQuantization(StrictOptions):
    compression: Literal["x4", "x8", "x16", "x32", "x64"] = "x16"


class QuantizationConfig(StrictOptions):
    """Qdrant's ``quantization_config``: exactly one of ``scalar``, ``binary``,
    ``product``."""

    scalar: ScalarQuantization | None = None
    binary: BinaryQuantization | None = None
    product: ProductQuantization | None = None

    @model_validator(mode="after")
    def _one(self) -> QuantizationConfig:
        if sum(x is not None for x in (self.scalar, self.binary, self.product)) != 1:
            raise ValueError("give exactly one of scalar, binary, product")
        return self


class QuantizationSearch(StrictOptions):
    ignore: bool = False
    rescore: bool | None = None
    oversampling: float | None = Field(default=None, ge=1.0, allow_inf_nan=False)


class SearchParams(StrictOptions):
    """Qdrant's ``search_params``: ``hnsw_ef``, ``exact`` and ``quantization``
    (``ignore``, ``rescore``, ``oversampling``); one shard serves a sweep of them."""

    hnsw_ef: int | None = Field(default=None, ge=1)
    exact: bool = False
    quantization: QuantizationSearch | None = None


class QdrantSweep(SweepOptions):
    """``sweep:`` of a Qdrant shard: ``hnsw_ef`` or ``oversampling`` (of
    ``search_params``), each a search request's own setting on the one shard."""

    TARGETS: ClassVar[dict[str, tuple[str, ...]]] = {
        "hnsw_ef": ("search_params", "hnsw_ef"),
        "oversampling": ("search_params", "quantization", "oversampling")}
    BUILD_TIME: ClassVar[tuple[str, ...]] = (
        "hnsw_config", "m", "ef_construct", "quantization_config", "distance",
        "optimizers_config", "indexing_threshold", "full_scan_threshold")

    hnsw_ef: list[int] | None = None
    oversampling: list[float] | None = None


class QdrantOptions(KindOptions):
    """``index: {kind: qdrant, ...}``: a Qdrant shard (Qdrant's engine, in-process), by
    Qdrant's names. ``distance``: ``Dot`` (what exact search uses), ``Cosine``,
    ``Euclid``, ``Manhattan``. ``path``: the folder the shard is kept in, in a
    subfolder named by the vectors' key (:mod:`evalq.retrieve.keyed`), reused by the
    next run of that key; left out, a folder under the recipe's ``cache_dir``
    (:meth:`with_home`), or with ``--no-cache`` a temporary folder removed after the run."""

    kind: Literal["qdrant"] = "qdrant"
    path: str | None = Field(default=None, min_length=1)
    distance: Literal["Dot", "Cosine", "Euclid", "Manhattan"] = "Dot"
    hnsw_config: HnswConfig = HnswConfig()
    optimizers_config: OptimizersConfig = OptimizersConfig()
    quantization_config: QuantizationConfig | None = None
    search_params: SearchParams = SearchParams()
    sweep: QdrantSweep | None = None

    @model_validator(mode="after")
    def _oversampling_needs_codes(self) -> QdrantOptions:
        sweep = self.sweep
        if sweep is not None and sweep.oversampling is not None \
                and self.quantization_config is None:
            raise ValueError("sweep.oversampling: oversampling applies to quantized vectors; "
                             "fix: set quantization_config (scalar, binary or product), or "
                             "sweep hnsw_ef")
        return self

    def with_home(self, cache_dir: Path) -> QdrantOptions:
        """The shards' folder under the cache (``vdb/qdrant-edge-<version>``: a shard
        opens with the engine that wrote it), unless the index names its own ``path``."""
        if self.path is not None:
            return self
        home = cache_dir / "vdb" / f"qdrant-edge-{_version() or 'unknown'}"
        return self.model_copy(update={"path": str(home)})

    def search_options(self) -> SearchParams:
        return self.search_params


class QdrantIndex:
    """One Qdrant edge shard of one variant's vectors."""

    in_process = True  # the engine runs inside evalq

    def __init__(self, options: QdrantOptions, where: str) -> None:
        self.options, self.where = options, where
        self._qe = _qdrant_edge()
        parent = Path(options.path).expanduser() if options.path else None
        if parent is not None:
            with contextlib.suppress(OSError):  # made here; refused below when it cannot be
                parent.mkdir(parents=True, exist_ok=True)
            if not parent.is_dir() or not os.access(parent, os.W_OK):
                raise InputError(message=f"the Qdrant folder {parent} is not a writable "
                                 "folder", field=f"{where}.path",
                                 fix="name a writable folder, or leave path out")
        self._parent = parent
        self.path = Path()  # the shard's folder, named by the vectors' key when loaded
        self.cache: keyed.CacheUse | None = None
        self._temporary = parent is None
        self._shard: Any = None
        self._lock: Any = None  # the key folder's lock, held while the shard is open
        self._ids: tuple[str, ...] = ()
        self._dim = 0
        self._upsert_s = self._optimize_s = self._search_s = 0.0
        self._queries = self._missing = 0
        self._params = options.search_params
        self._query_s = np.zeros(0, dtype=np.float64)

    def _config(self) -> Any:
        qe, o = self._qe, self.options
        hnsw = qe.HnswIndexConfig(m=o.hnsw_config.m, ef_construct=o.hnsw_config.ef_construct,
                                  full_scan_threshold=o.hnsw_config.full_scan_threshold)
        return qe.EdgeConfig(
            vectors=qe.EdgeVectorParams(size=self._dim, distance=getattr(qe.Distance,
                                                                         o.distance)),
            hnsw_config=hnsw, quantization_config=_quantization(qe, o.quantization_config),
            optimizers=qe.EdgeOptimizersConfig(
                indexing_threshold=o.optimizers_config.indexing_threshold))

    def add(self, docs: Documents) -> None:
        """Load the corpus into the shard its key names (:mod:`evalq.retrieve.keyed`):
        reuse a complete one, finish an interrupted one (only the points it lacks; a
        point's id is the document's position), or make it; then optimize (the HNSW graph
        and the quantized vectors) and mark the shard complete. Added once, whole."""
        if docs.vectors is None:
            raise ValueError("a Qdrant shard is built from vectors; these documents have none")
        if self._ids:
            raise ValueError("a Qdrant shard is keyed by its whole corpus; add it once")
        vectors = np.ascontiguousarray(docs.vectors, dtype=np.float32)
        self._dim = int(vectors.shape[1])
        key = keyed.vectors_key("qdrant", docs.ids, vectors, keyed.build_options(
            self.options, _BUILD_OPTIONS))
        folder = (Path(tempfile.mkdtemp(prefix="evalq-qdrant-")) if self._parent is None
                  else self._parent / f"evalq-{key[:24]}")
        self.path, marker = folder / "shard", folder / "complete"
        self._ids = tuple(docs.ids)
        self._lock = folders.hold(folder, f"the Qdrant shard in {folder}", f"{self.where}.path")
        try:
            self._open(folder)
            have = self._points_stored(len(vectors))
            self.cache = keyed.CacheUse(key, resumed=len(have), rows=len(vectors),
                                        reused=len(have) == len(vectors) and marker.is_file())
            if self.cache.reused:
                return
            self._upsert(vectors, have)
            began = time.perf_counter()
            self._shard.optimize()  # builds the HNSW graph and the quantized vectors
            self._shard.flush()
            self._optimize_s = time.perf_counter() - began
        except (RuntimeError, ValueError, OSError) as exc:
            raise InputError(message=f"Qdrant refused the shard in {self.path} ({exc})",
                             field=self.where,
                             fix="use options Qdrant accepts (hnsw_config, "
                                 "quantization_config) and a writable path") from None
        marker.write_text(key + "\n")

    def _open(self, folder: Path) -> None:
        """Load the key's shard (its config checked against the options'), or make it."""
        qe = self._qe
        folder.mkdir(parents=True, exist_ok=True)
        if self.path.is_dir() and any(self.path.iterdir()):
            self._shard = qe.EdgeShard.load(str(self.path), self._config())
        else:
            self._shard = qe.EdgeShard.create(str(self.path), self._config())

    def _points_stored(self, n: int) -> set[int]:
        """The point ids (of ``0 .. n-1``) already in the shard."""
        if int(self._shard.info().points_count) == 0:
            return set()
        have: set[int] = set()
        for start in range(0, n, _UPSERT_BATCH * 8):
            asked = list(range(start, min(n, start + _UPSERT_BATCH * 8)))
            have.update(int(r.id) for r in self._shard.retrieve(asked, False, False))
        return have

    def _upsert(self, vectors: np.ndarray, have: set[int]) -> None:
        qe = self._qe
        missing = [i for i in range(len(vectors)) if i not in have]
        began = time.perf_counter()
        for start in range(0, len(missing), _UPSERT_BATCH):
            points = [qe.Point(i, vectors[i].tolist())
                      for i in missing[start:start + _UPSERT_BATCH]]
            self._shard.update(qe.UpdateOperation.upsert_points(points))
        self._upsert_s = time.perf_counter() - began

    def search(self, queries: Queries, depth: int, params: Any = None) -> Ranking:
        if queries.vectors is None:
            raise ValueError("a Qdrant shard is searched with query vectors; these have none")
        qe = self._qe
        wanted: SearchParams = params if params is not None else self.options.search_params
        self._params = wanted
        request_params = self._request_params(wanted)
        vectors = np.ascontiguousarray(queries.vectors, dtype=np.float32)
        idx = np.full((len(vectors), depth), -1, dtype=np.int64)
        scores = np.full((len(vectors), depth), np.nan, dtype=np.float64)
        sign = -1.0 if self.options.distance in _LOWER_IS_BETTER else 1.0
        self._query_s = np.zeros(len(vectors), dtype=np.float64)
        began = time.perf_counter()
        try:
            for row, vector in enumerate(vectors):
                asked = time.perf_counter()
                found = self._shard.search(qe.SearchRequest(
                    query=qe.Query.Nearest(vector.tolist()), limit=depth,
                    params=request_params))
                self._query_s[row] = time.perf_counter() - asked
                for col, point in enumerate(found):
                    idx[row, col], scores[row, col] = int(point.id), sign * point.score
        except (RuntimeError, ValueError) as exc:
            raise InputError(message=f"Qdrant refused the search ({exc})",
                             field=f"{self.where}.search_params",
                             fix="use search_params Qdrant accepts") from None
        except Exception as exc:
            raise self._broken(exc) from None
        self._search_s = time.perf_counter() - began
        self._queries, self._missing = len(vectors), int((idx < 0).sum())
        order = np.argsort(-np.nan_to_num(scores, nan=-np.inf), axis=1, kind="stable")
        idx, scores = np.take_along_axis(idx, order, 1), np.take_along_axis(scores, order, 1)
        return Ranking.from_search(queries.ids, self._ids, idx, scores)

    def _request_params(self, wanted: SearchParams) -> Any:
        quant, qe = wanted.quantization, self._qe
        return qe.SearchParams(
            hnsw_ef=wanted.hnsw_ef, exact=wanted.exact,
            quantization=None if quant is None else qe.QuantizationSearchParams(
                ignore=quant.ignore, rescore=quant.rescore, oversampling=quant.oversampling))

    def nearest(self, vector: np.ndarray, depth: int) -> tuple[str, ...]:
        """One query at the options' ``search_params``: the documents' ids, best first
        (a concurrent worker's search: :mod:`evalq.retrieve.workers`)."""
        qe = self._qe
        found = self._shard.search(qe.SearchRequest(
            query=qe.Query.Nearest(np.asarray(vector, dtype=np.float32).tolist()),
            limit=depth, params=self._request_params(self.options.search_params)))
        sign = -1.0 if self.options.distance in _LOWER_IS_BETTER else 1.0
        ranked = sorted(found, key=lambda p: -sign * p.score)  # stable: ties keep order
        return tuple(self._ids[int(p.id)] for p in ranked)

    def server_pid(self) -> None:
        return None  # in this process: no server of its own to sample

    def connections_left(self) -> None:
        """No limit: the shard is in this process (its workers are threads)."""
        return None

    def worker(self, timeout_s: float) -> workers.SharedWorker:
        """A thread's worker on the one in-process shard (no timeout of its own)."""
        return workers.SharedWorker(self.nearest)

    def search_timed(self, queries: Queries, depth: int, params: Any
                     ) -> tuple[Ranking, np.ndarray]:
        """:meth:`search` at ``params``, with each query's seconds in Qdrant's engine."""
        ranking = self.search(queries, depth, params)
        return ranking, self._query_s.copy()

    def _broken(self, exc: Exception) -> Exception:
        """qdrant-edge's own service errors arrive as a bare ``Exception`` (a shard closed
        or broken under the run: "Shard is not initialized"): exit 2 with what a rerun
        keeps. Any other type is evalq's bug, returned as it is."""
        if type(exc) is not Exception:
            return exc
        kept = ("the shard is kept in path, and the rerun reuses it (or resumes an "
                "interrupted ingest)" if not self._temporary else
                "set path: in the index to keep the shard for a rerun")
        return InputError(message=f"the Qdrant shard in {self.path} stopped answering "
                                  f"({str(exc).splitlines()[0][:200]})",
                          field=self.where,
                          fix=f"rerun; {kept}; if it keeps failing, check the disk under "
                              f"{self.path.parent}")

    def _info(self) -> dict[str, int]:
        try:
            info = self._shard.info()
        except Exception as exc:
            raise self._broken(exc) from None
        return {"points": int(info.points_count),
                "indexed_vectors": int(info.indexed_vectors_count),
                "segments": int(info.segments_count)}

    def stats(self) -> IndexStats:
        on_disk = sum(f.stat().st_blocks * 512 for f in self.path.rglob("*") if f.is_file())
        searched = self._search_s > 0 and self._queries
        return IndexStats(
            bytes=int(on_disk), build_s=self._upsert_s + self._optimize_s,
            documents=len(self._ids),
            detail={"upsert_s": self._upsert_s, "optimize_s": self._optimize_s,
                    "search_s": self._search_s, **self._info(),
                    "queries_per_s": self._queries / self._search_s if searched else None,
                    "missing_slots": self._missing, "qdrant_edge": _version(),
                    **(self.cache.record() if self.cache is not None else {})})

    def proof(self) -> IndexProof:
        """Read back from the shard: how many vectors the HNSW index holds. A search is
        exhaustive when it asked for ``exact``, when nothing is indexed, or when the
        vectors are under ``full_scan_threshold``."""
        info = self._info()
        vectors_kb = info["points"] * self._dim * 4 / 1024
        below = vectors_kb < self.options.hnsw_config.full_scan_threshold
        exact = self._params.exact or info["indexed_vectors"] == 0 or below
        quant = self.options.quantization_config
        method = "full scan" if exact else "HNSW"
        if quant is not None:
            method += f" over {next(k for k, v in quant.model_dump().items() if v)} codes"
        return IndexProof(kind="qdrant", exact=exact, method=method, params={
            **info, "vectors_kb": vectors_kb, "below_full_scan_threshold": below,
            **self.options.hnsw_config.model_dump(),
            **self.options.optimizers_config.model_dump(),
            "search_params": self._params.model_dump(exclude_none=True)})

    def close(self) -> None:
        """Close the shard; it stays in ``path`` for the next run of its key (a shard in
        the system's temporary folder, ``path`` left out, is removed)."""
        if self._shard is not None:
            self._shard.close()
            self._shard = None
        if self._lock is not None:
            self._lock.close()
            self._lock = None
        if self._temporary and self.path != Path():
            shutil.rmtree(self.path.parent, ignore_errors=True)


def _quantization(qe: Any, config: QuantizationConfig | None) -> Any:
    if config is None:
        return None
    if config.scalar is not None:
        return qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8,
                                           quantile=config.scalar.quantile)
    if config.binary is not None:
        encoding = {"one_bit": "OneBit", "one_and_half_bits": "OneAndHalfBits",
                    "two_bits": "TwoBits"}[config.binary.encoding]
        return qe.BinaryQuantizationConfig(
            encoding=getattr(qe.BinaryQuantizationEncoding, encoding))
    assert config.product is not None
    return qe.ProductQuantizationConfig(
        compression=getattr(qe.CompressionRatio, config.product.compression.upper()))


def _qdrant_edge() -> Any:
    try:
        import qdrant_edge
    except ImportError as exc:
        raise MissingExtraError("qdrant-edge-py", "vdb", "kind: qdrant") from exc
    return qdrant_edge


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("qdrant-edge-py")
    except PackageNotFoundError:
        return None


def _build(options: QdrantOptions, docs: Documents, where: str) -> QdrantIndex:
    return kinds.filled(QdrantIndex(options, where), docs)


KIND = KindSpec(name="qdrant", summary="a Qdrant shard searched by Qdrant's engine "
                "in-process (HNSW; scalar int8, binary or product quantization with "
                "oversampling and rescoring)", inputs="vectors", options=QdrantOptions,
                build=_build, search_options=SearchParams, database=True)
