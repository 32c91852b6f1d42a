"""``kind: qdrant`` with ``url:``: the variant's vectors in a collection on a team's Qdrant
server, through qdrant-client over REST, with the same options as the in-process shard.

Why a server: the in-process engine answers "what does Qdrant's index lose on these
vectors", but a team that has outgrown one machine wants the same variant judged on the
database its users search, with its version and its configuration. The collection is
built and searched as the in-process shard is, so the two are comparable option for
option:

- Named by the vectors' key (:mod:`evalq.retrieve.keyed`, the key the in-process shard
  uses): ``evalq-<24 hex digits>``, or the ``collection`` the recipe names. The key is
  also stored in the collection's metadata, so a named collection that holds other
  vectors (or was made with other build options, or not by evalq) is refused instead of
  overwritten.
- Cached and resumable: a point's id is the document's position in the keyed corpus, so
  a rerun asks the server which ids it already holds, uploads only the missing ones
  (batched upserts, each waited for) and reuses a complete collection with no upload.
- The indexing trap (:mod:`evalq.retrieve.qdrant_kind`): the collection is created with
  the same lowered ``indexing_threshold`` / ``full_scan_threshold``, and the run waits
  (at most ``index_wait_s``) until the server reports the points indexed; the proof is
  the server's own ``indexed_vectors_count``.
- Faults are the user's to fix (exit 2, naming the field): a server that does not
  answer, an API key it refuses, a collection of other dimensions or distance, options
  it refuses (HTTP 400), a server that stops answering mid-run (the collection stays on
  the server; the rerun reuses it or resumes its upload).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from evalq.core.errors import InputError
from evalq.retrieve import keyed
from evalq.retrieve.kinds import Documents, IndexProof, IndexStats
from evalq.retrieve.qdrant_connection import QdrantConnection
from evalq.retrieve.qdrant_options import (
    BUILD_OPTIONS,
    DEFAULT_INDEX_WAIT_S,
    QdrantOptions,
    QuantizationConfig,
    SearchParams,
    proof,
)
from evalq.retrieve.qdrant_search import PointsSearch
from evalq.retrieve.serverwatch import ServerWatch, qdrant

_UPSERT_BATCH = 512  # points per upsert request (a few MB of JSON at 384 dimensions)
_RETRIEVE_BATCH = 8192  # ids asked per request when looking for an interrupted upload
_POLL_S = 0.2  # between two reads of the collection's indexing state
KEY_FIELD = "evalq_key"  # the collection metadata's field holding the vectors' key


class QdrantServerIndex(PointsSearch):
    """One collection of one variant's vectors on a Qdrant server."""

    in_process = False  # a server of its own (evalq load watches what it can of it)

    def __init__(self, options: QdrantOptions, where: str) -> None:
        self.options, self.where = options, where
        self.server = QdrantConnection(
            options.url or "", options.api_key_env, options.timeout, where,
            needed_for="kind: qdrant with url:", build_field=self._build_field,
            gone_fix="it was deleted during the run: rerun (it is uploaded again)")
        self.label, self.server_version = self.server.label, self.server.version
        self._client, self._call, self._qc = (self.server.client, self.server.call,
                                              self.server.qc)
        self.collection = ""  # named by the vectors' key when loaded (or by the recipe)
        self.cache: keyed.CacheUse | None = None
        self._ids: tuple[str, ...] = ()
        self._dim = 0
        self._upsert_s = self._index_s = 0.0
        self._init_search()

    # -- building ---------------------------------------------------------------------
    def add(self, docs: Documents) -> None:
        """Load the corpus into the collection its key names: reuse a complete one,
        finish an interrupted upload (only the ids it lacks), or create it; then wait
        until the server has indexed it. Added once, whole."""
        if docs.vectors is None:
            raise ValueError("a Qdrant collection is built from vectors; these documents "
                             "have none")
        if self._ids:
            raise ValueError("a Qdrant collection is keyed by its whole corpus; add it once")
        vectors = np.ascontiguousarray(docs.vectors, dtype=np.float32)
        self._dim, self._ids = int(vectors.shape[1]), tuple(docs.ids)
        key = keyed.vectors_key("qdrant", docs.ids, vectors, keyed.build_options(
            self.options, BUILD_OPTIONS))
        self.collection = self.options.collection or f"evalq-{key[:24]}"
        self.server.collection = self.collection
        exists = self._call("url", self._client.collection_exists, self.collection)
        have = self._stored(key, len(vectors)) if exists else set()
        if not exists:
            self._create(key)
        self.cache = keyed.CacheUse(key, resumed=len(have), rows=len(vectors),
                                    reused=len(have) == len(vectors))
        if self.cache.reused:
            self._wait_indexed()
            return
        self._upsert(vectors, have)
        began = time.perf_counter()
        self._wait_indexed()
        self._index_s = time.perf_counter() - began

    def _stored(self, key: str, n: int) -> set[int]:
        """The point ids (of ``0 .. n-1``) an existing collection holds, after checking
        that it is this corpus's: its dimensions, distance and key."""
        info = self._call("collection", self._client.get_collection, self.collection)
        vectors = info.config.params.vectors
        size = getattr(vectors, "size", None)
        distance = getattr(getattr(vectors, "distance", None), "value", None)
        if size != self._dim or distance != self.options.distance:
            holds = ("named vectors" if size is None else f"{size} dimensions, distance "
                     f"{distance}")
            raise InputError(
                message=f"the collection '{self.collection}' on {self.label} holds {holds}; "
                        f"this variant's vectors have {self._dim} dimensions and distance "
                        f"{self.options.distance}",
                field=f"{self.where}.collection",
                fix="name another collection (or leave collection out: evalq names one by "
                    "the vectors' key), or set distance to the collection's")
        made = (info.config.metadata or {}).get(KEY_FIELD)
        if made != key and (made is not None or self.options.collection is not None):
            raise InputError(
                message=f"the collection '{self.collection}' on {self.label} holds other "
                        "vectors (not this corpus with these build options"
                        + (", and was not made by evalq)" if made is None else ")"),
                field=f"{self.where}.collection",
                fix="name a new collection, or leave collection out: evalq names one by "
                    "the vectors' key and never writes into a collection it did not make")
        have: set[int] = set()
        if not info.points_count:
            return have
        for start in range(0, n, _RETRIEVE_BATCH):
            asked = list(range(start, min(n, start + _RETRIEVE_BATCH)))
            found = self._call("url", self._client.retrieve, self.collection, ids=asked,
                               with_payload=False, with_vectors=False)
            have.update(int(r.id) for r in found)
        if int(info.points_count) > len(have):
            raise InputError(
                message=f"the collection '{self.collection}' on {self.label} holds "
                        f"{info.points_count} points, {int(info.points_count) - len(have)} "
                        "of them not this corpus's",
                field=f"{self.where}.collection",
                fix="name a new collection, or delete that one on the server")
        return have

    def _create(self, key: str) -> None:
        m, o = self._qc.models, self.options
        self._call(
            "build", self._client.create_collection, self.collection,
            vectors_config=m.VectorParams(size=self._dim, distance=m.Distance(o.distance)),
            hnsw_config=m.HnswConfigDiff(**o.hnsw_config.model_dump()),
            optimizers_config=m.OptimizersConfigDiff(**o.optimizers_config.model_dump()),
            quantization_config=_quantization(m, o.quantization_config),
            metadata={KEY_FIELD: key})

    def _upsert(self, vectors: np.ndarray, have: set[int]) -> None:
        models = self._qc.models
        missing = [i for i in range(len(vectors)) if i not in have]
        began = time.perf_counter()
        for start in range(0, len(missing), _UPSERT_BATCH):
            ids = missing[start:start + _UPSERT_BATCH]
            batch = models.Batch(ids=ids, vectors=vectors[ids].tolist())
            self._call("build", self._client.upsert, self.collection, points=batch,
                       wait=True)
        self._upsert_s = time.perf_counter() - began

    def _wait_indexed(self) -> None:
        """Poll the collection until the server has indexed every point (when its
        vectors pass ``indexing_threshold``, so that it should) and its optimizer is
        idle, at most ``index_wait_s``. A ``grey`` collection (a restarted server holds
        optimizations it has not started) is nudged with its own optimizers config, the
        update Qdrant documents for starting them."""
        limit = self.options.index_wait_s or DEFAULT_INDEX_WAIT_S
        kb = len(self._ids) * self._dim * 4 / 1024
        expect = kb >= self.options.optimizers_config.indexing_threshold
        deadline = time.monotonic() + limit
        while True:
            info = self._info()
            failed = getattr(info["optimizer"], "error", None)
            if failed:
                raise InputError(message=f"{self.label} failed to optimize the collection "
                                         f"'{self.collection}' ({failed})",
                                 field=self.where,
                                 fix="read the server's log; use options it accepts")
            done = info["status"] == "green" and (
                not expect or info["indexed_vectors"] >= info["points"])
            if done:
                return
            if info["status"] == "grey":  # optimizations pending but not triggered
                self._call("optimizers_config", self._client.update_collection,
                           self.collection, optimizers_config=self._qc.models.
                           OptimizersConfigDiff(**self.options.optimizers_config.model_dump()))
            if time.monotonic() >= deadline:
                raise InputError(
                    message=f"{self.label} had indexed {info['indexed_vectors']} of "
                            f"{info['points']} points of '{self.collection}' after {limit:g}"
                            f" s (status {info['status']})",
                    field=f"{self.where}.index_wait_s",
                    fix="raise index_wait_s, or check the server's load; the upload is "
                        "kept, and the rerun waits again without uploading")
            time.sleep(_POLL_S)

    # -- searching --------------------------------------------------------------------
    def _ask(self, vector: list[float], depth: int, wanted: SearchParams) -> Any:
        m, quant = self._qc.models, wanted.quantization
        request = m.SearchParams(
            hnsw_ef=wanted.hnsw_ef, exact=wanted.exact,
            quantization=None if quant is None else m.QuantizationSearchParams(
                ignore=quant.ignore, rescore=quant.rescore, oversampling=quant.oversampling))
        return self._call("search_params", self._client.query_points, self.collection,
                          query=vector, limit=depth, search_params=request,
                          with_payload=False, with_vectors=False).points

    # -- reporting --------------------------------------------------------------------
    def _info(self) -> dict[str, Any]:
        info = self._call("collection", self._client.get_collection, self.collection)
        return {"points": int(info.points_count or 0),
                "indexed_vectors": int(info.indexed_vectors_count or 0),
                "segments": int(info.segments_count), "status": str(info.status),
                "optimizer": info.optimizer_status}

    def _counts(self) -> dict[str, int]:
        info = self._info()
        return {k: info[k] for k in ("points", "indexed_vectors", "segments")}

    def stats(self) -> IndexStats:
        """The upload and indexing seconds, the server's counts and versions. The
        collection's bytes are not readable through Qdrant's REST API: 0 here."""
        searched = self._search_s > 0 and self._queries
        return IndexStats(
            bytes=0, build_s=self._upsert_s + self._index_s, documents=len(self._ids),
            detail={"upsert_s": self._upsert_s, "optimize_s": self._index_s,
                    "search_s": self._search_s, **self._counts(),
                    "queries_per_s": self._queries / self._search_s if searched else None,
                    "missing_slots": self._missing, "qdrant_client": _version(),
                    "qdrant_server": self.server_version, "server": self.label,
                    "collection": self.collection,
                    **(self.cache.record() if self.cache is not None else {})})

    def server_watch(self) -> ServerWatch:
        """Its ``/metrics`` memory, and its process when it listens on this host."""
        return qdrant(self.options.url or "", self.server.headers)

    def alive(self) -> bool:
        """Whether the server still answers its root page (a fresh request, not the
        client's pool)."""
        return self.server.answers()

    def proof(self) -> IndexProof:
        """Read back from the server: how many vectors its HNSW index holds."""
        return proof(self.options, self._params, self._counts(), self._dim)

    def close(self) -> None:
        """Close the client; the collection stays on the server for the next run."""
        self._client.close()

    # -- faults -----------------------------------------------------------------------
    def _build_field(self, said: str) -> str:
        """The build-time option a refusal of the collection names (the server's message
        says ``quantization_config.binary...`` or ``hnsw``...); when it names none, the
        quantization (the option most often missing from an older server), else the
        graph's."""
        named = [f for f in ("quantization_config", "hnsw_config", "optimizers_config",
                             "distance") if f.split("_")[0] in said]
        if named:
            return named[0]
        return "quantization_config" if self.options.quantization_config else "hnsw_config"


def _quantization(m: Any, config: QuantizationConfig | None) -> Any:
    if config is None:
        return None
    if config.scalar is not None:
        return m.ScalarQuantization(scalar=m.ScalarQuantizationConfig(
            type=m.ScalarType.INT8, quantile=config.scalar.quantile))
    if config.binary is not None:
        return m.BinaryQuantization(binary=m.BinaryQuantizationConfig(
            encoding=m.BinaryQuantizationEncoding(config.binary.encoding)))
    assert config.product is not None
    return m.ProductQuantization(product=m.ProductQuantizationConfig(
        compression=m.CompressionRatio(config.product.compression)))


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("qdrant-client")
    except PackageNotFoundError:
        return None

