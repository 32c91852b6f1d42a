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

With ``url:`` the same options point the variant at a Qdrant server instead
(:mod:`evalq.retrieve.qdrant_server`, through qdrant-client); the options themselves
live in :mod:`evalq.retrieve.qdrant_options`, shared by both.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.errors import InputError, MissingExtraError
from evalq.retrieve import folders, keyed, kinds, qdrant_server
from evalq.retrieve.kinds import Documents, Index, IndexProof, IndexStats, KindSpec
from evalq.retrieve.qdrant_options import (
    BUILD_OPTIONS,
    QdrantOptions,
    QuantizationConfig,
    SearchParams,
    edge_version,
    proof,
)
from evalq.retrieve.qdrant_search import PointsSearch, SearchedRows

_UPSERT_BATCH = 1024  # points per upsert


class QdrantIndex(PointsSearch):
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
        self._upsert_s = self._optimize_s = 0.0
        self._init_search()

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
            self.options, BUILD_OPTIONS))
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
        except Exception as exc:  # qdrant-edge's own errors: a bare Exception
            # a kept shard cut short or written over (a full disk, a killed write)
            raise self._edge_error(
                exc, "cannot be loaded", f"{self.where}.path",
                f"delete {folder} (evalq's shard of these vectors; the rerun builds it "
                f"again); if it recurs, check the disk under {folder.parent}") from None
        marker.write_text(key + "\n")

    def _edge_error(self, exc: Exception, what: str, field: str, fix: str) -> Exception:
        """qdrant-edge's own errors arrive as a bare ``Exception`` (a shard it cannot
        load, one closed or broken under the run): the user's to fix, exit 2 saying
        ``what`` happened to the shard. Any other type is evalq's bug, returned as it is."""
        if type(exc) is not Exception:
            return exc
        return InputError(message=f"the Qdrant shard in {self.path} {what} "
                                  f"({str(exc).splitlines()[0][:200]})",
                          field=field, fix=fix)

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

    def _ask(self, vector: list[float], depth: int, wanted: SearchParams) -> Any:
        qe, quant = self._qe, wanted.quantization
        params = qe.SearchParams(
            hnsw_ef=wanted.hnsw_ef, exact=wanted.exact,
            quantization=None if quant is None else qe.QuantizationSearchParams(
                ignore=quant.ignore, rescore=quant.rescore, oversampling=quant.oversampling))
        return self._shard.search(qe.SearchRequest(query=qe.Query.Nearest(vector),
                                                   limit=depth, params=params))

    def _rows(self, vectors: np.ndarray, depth: int, wanted: SearchParams) -> SearchedRows:
        try:
            return super()._rows(vectors, depth, wanted)
        except (RuntimeError, ValueError) as exc:
            raise InputError(message=f"Qdrant refused the search ({exc})",
                             field=f"{self.where}.search_params",
                             fix="use search_params Qdrant accepts") from None
        except Exception as exc:
            raise self._broken(exc) from None

    def _broken(self, exc: Exception) -> Exception:
        """A shard that stopped answering under the run ("Shard is not initialized"), with
        what a rerun keeps."""
        kept = ("the shard is kept in path, and the rerun reuses it (or resumes an "
                "interrupted ingest)" if not self._temporary else
                "set path: in the index to keep the shard for a rerun")
        return self._edge_error(exc, "stopped answering", self.where,
                                f"rerun; {kept}; if it keeps failing, check the disk under "
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
                    "missing_slots": self._missing, "qdrant_edge": edge_version(),
                    **(self.cache.record() if self.cache is not None else {})})

    def proof(self) -> IndexProof:
        """Read back from the shard: how many vectors the HNSW index holds
        (:func:`~evalq.retrieve.qdrant_options.proof`)."""
        return proof(self.options, self._params, self._info(), self._dim)

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


def _build(options: QdrantOptions, docs: Documents, where: str) -> Index:
    if options.url is not None:
        return kinds.filled(qdrant_server.QdrantServerIndex(options, where), docs)
    return kinds.filled(QdrantIndex(options, where), docs)


KIND = KindSpec(name="qdrant", summary="a Qdrant collection: a shard searched by Qdrant's "
                "engine in-process, or url: for your Qdrant server (HNSW; scalar int8, "
                "binary or product quantization with oversampling and rescoring)",
                inputs="vectors", options=QdrantOptions, build=_build,
                search_options=SearchParams, database=True)
