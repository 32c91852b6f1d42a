"""A stand-in for a Qdrant server, for the tests of ``kind: qdrant`` with ``url:``.

A real Qdrant server cannot run on the test machines (no binary, no container, no
network), so this loopback HTTP server speaks the part of Qdrant's REST API that
qdrant-client calls for evalq's collections, with the request and response shapes of
qdrant-client's own models (``qdrant_client/http/api/*.py``,
``qdrant_client/http/models/models.py``):

- ``GET /`` (version), ``GET /collections/{name}/exists``, ``GET /collections/{name}``
  (``CollectionInfo``), ``PUT /collections/{name}`` (``CreateCollection``),
  ``PATCH /collections/{name}`` (``UpdateCollection``: starts pending optimizations),
  ``DELETE /collections/{name}``;
- ``PUT /collections/{name}/points`` (upsert: ``PointsBatch`` or ``PointsList``),
  ``POST /collections/{name}/points`` (retrieve by ids), ``POST
  /collections/{name}/points/count``, ``POST /collections/{name}/points/query``
  (``QueryRequest``: a nearest-vector query with ``params``), ``POST
  /collections/{name}/points/scroll`` (``ScrollRequest``: pages of points with their
  payload and vectors, for ``documents: {qdrant: {url}}``) and ``GET /collections``.
  A collection of named vectors or of sparse vectors only is kept as its configuration
  (no shard, no points): enough for the tests that it is refused.

Behind it is Qdrant's real engine in-process (qdrant-edge-py, one shard per collection),
so its HNSW graph, quantization, oversampling and rescoring are Qdrant's own. Like a
server, it indexes in the background: the first read of a collection after an upload
reports it ``yellow`` with what is indexed so far, and the shard is optimized after that
answer, so a client must poll; a collection set ``grey`` (a restarted server's pending
optimizations) is indexed only after an update of the collection. ``refusals`` makes it
answer HTTP 400 to a request whose body holds a given option (as a server of an older
version refuses an option it lacks); ``api_key`` makes it answer 401 to a request
without that key; ``stalled`` keeps it from ever indexing (an overloaded server);
``stop()`` kills it mid-run (connections refused from then on), ``restart()`` brings it
back with its collections. ``GET /metrics`` answers Qdrant's memory gauges
(``memory_resident_bytes``, ``memory_allocated_bytes``) with the stand-in process's own
real RSS (``metrics = False``: a server that does not answer them). HTTP/1.0: one request
per connection, so a stopped stand-in answers nothing more.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.metadata import version
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import psutil
import qdrant_edge as qe


class _Collection:
    """One collection: its creation request, its shard, and whether it needs indexing."""

    def __init__(self, folder: Path, body: dict[str, Any]) -> None:
        self.body, self.dirty = body, False
        self.grey = False  # optimizations pending, not triggered (a restarted server)
        vectors = body.get("vectors") or {}
        if "size" not in vectors:  # named vectors, or sparse only: a configuration, no shard
            self.size, self.distance, self.shard = 0, None, None
            return
        self.size, self.distance = int(vectors["size"]), vectors["distance"]
        hnsw = body.get("hnsw_config") or {}
        config = qe.EdgeConfig(
            vectors=qe.EdgeVectorParams(size=self.size,
                                        distance=getattr(qe.Distance, self.distance)),
            hnsw_config=qe.HnswIndexConfig(
                m=hnsw.get("m", 16), ef_construct=hnsw.get("ef_construct", 100),
                full_scan_threshold=hnsw.get("full_scan_threshold", 10000)),
            quantization_config=_quantization(body.get("quantization_config")),
            optimizers=qe.EdgeOptimizersConfig(indexing_threshold=(
                body.get("optimizers_config") or {}).get("indexing_threshold", 10000)))
        folder.mkdir(parents=True)
        self.shard = qe.EdgeShard.create(str(folder), config)

    def info(self) -> dict[str, Any]:
        """``CollectionInfo``: yellow while an upload waits to be indexed."""
        if self.shard is None:
            return {"status": "green", "optimizer_status": "ok", "indexed_vectors_count": 0,
                    "points_count": 0, "segments_count": 0, "payload_schema": {},
                    "config": {"params": {"vectors": self.body.get("vectors") or {},
                                          "sparse_vectors": self.body.get("sparse_vectors")},
                               "hnsw_config": {"m": 16, "ef_construct": 100,
                                               "full_scan_threshold": 10000},
                               "optimizer_config": {"default_segment_number": 0,
                                                    "flush_interval_sec": 5},
                               "metadata": None}}
        shard = self.shard.info()
        hnsw = {"m": 16, "ef_construct": 100, "full_scan_threshold": 10000,
                **(self.body.get("hnsw_config") or {})}
        return {
            "status": "grey" if self.grey else "yellow" if self.dirty else "green",
            "optimizer_status": "ok",
            "indexed_vectors_count": int(shard.indexed_vectors_count),
            "points_count": int(shard.points_count),
            "segments_count": int(shard.segments_count), "payload_schema": {},
            "config": {
                "params": {"vectors": {"size": self.size, "distance": self.distance}},
                "hnsw_config": hnsw,
                "optimizer_config": {"default_segment_number": 0, "flush_interval_sec": 5,
                                     **(self.body.get("optimizers_config") or {})},
                "quantization_config": self.body.get("quantization_config"),
                "metadata": self.body.get("metadata")}}


class QdrantStandIn:
    """The stand-in server on 127.0.0.1 (a free port), its collections in a temporary
    folder; ``url`` is what a recipe's ``url:`` takes."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="evalq-qdrant-standin-"))
        self.collections: dict[str, _Collection] = {}
        self.refusals: dict[str, str] = {}  # dotted option in a request body -> error
        self.api_key: str | None = None  # when set, the ``api-key`` header must match
        self.stalled = False  # never indexes (a server too busy to optimize)
        self.metrics = True  # answers GET /metrics (its own RSS under Qdrant's names)
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request
        self.lock = threading.Lock()
        self._made = 0
        self._serve(0)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"

    def _serve(self, port: int) -> None:
        handler = type("Handler", (_Handler,), {"standin": self})
        self.http = ThreadingHTTPServer(("127.0.0.1", port), handler)
        self.http.daemon_threads = True
        self.stopped = False
        threading.Thread(target=self.http.serve_forever, daemon=True).start()

    def stop(self) -> None:
        """Stop answering (as a server killed mid-run): the port is closed."""
        if not self.stopped:
            self.stopped = True
            self.http.shutdown()
            self.http.server_close()

    def restart(self) -> None:
        """Answer again on the same port, with the collections it held (a restarted
        server keeps its storage)."""
        self.stop()
        self._serve(int(self.url.rsplit(":", 1)[1]))

    def close(self) -> None:
        self.stop()
        for collection in self.collections.values():
            if collection.shard is not None:
                collection.shard.close()
        shutil.rmtree(self.folder, ignore_errors=True)

    def upserts(self) -> int:
        return sum(1 for method, path in self.requests
                   if method == "PUT" and path.endswith("/points"))

    def create(self, name: str, body: dict[str, Any]) -> None:
        self._made += 1
        self.collections[name] = _Collection(self.folder / f"c{self._made}", body)

    def delete(self, name: str) -> None:
        collection = self.collections.pop(name)
        if collection.shard is not None:
            collection.shard.close()


class _Handler(BaseHTTPRequestHandler):
    standin: QdrantStandIn

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._answer("GET")

    def do_PUT(self) -> None:
        self._answer("PUT")

    def do_POST(self) -> None:
        self._answer("POST")

    def do_DELETE(self) -> None:
        self._answer("DELETE")

    def do_PATCH(self) -> None:
        self._answer("PATCH")

    def _answer(self, method: str) -> None:
        path = unquote(urlsplit(self.path).path).rstrip("/") or "/"
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else {}
        s = self.standin
        s.requests.append((method, path))
        if s.api_key is not None and self.headers.get("api-key") != s.api_key:
            return self._send(401, {"status": {"error": "Invalid api-key"}, "time": 0.0})
        for option, error in s.refusals.items():
            if _holds(body, option):
                return self._send(400, {"status": {"error": error}, "time": 0.0})
        if path == "/collections" and method == "GET":
            return self._send(200, {"result": {"collections": [
                {"name": n} for n in sorted(s.collections)]}, "status": "ok", "time": 0.0})
        if path == "/" and method == "GET":
            return self._send(200, {"title": "qdrant - vector search engine (evalq test "
                                              "stand-in)", "version": version("qdrant-edge-py")})
        if path == "/metrics" and method == "GET" and s.metrics:
            return self._send_text(_metrics_page())
        found = re.fullmatch(r"/collections/([^/]+)(/.*)?", path)
        if found is None:
            return self._send(404, {"status": {"error": f"Not found: {path}"}, "time": 0.0})
        name, rest = found.group(1), found.group(2) or ""
        with s.lock:
            status, result = _route(s, method, name, rest, body, self.path)
        if status != 200:
            return self._send(status, {"status": {"error": result}, "time": 0.0})
        self._send(200, {"result": result, "status": "ok", "time": 0.0})
        collection = s.collections.get(name)
        if rest == "" and method == "GET" and collection is not None and collection.dirty \
                and not collection.grey and not s.stalled:
            with s.lock:  # indexed after the answer that said yellow, as a server does
                collection.shard.optimize()
                collection.dirty = False

    def _send_text(self, text: str) -> None:
        data = text.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send(self, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _metrics_page() -> str:
    """A Prometheus page with Qdrant's memory gauges' names. The stand-in is no Qdrant
    server and has no jemalloc: both gauges are its own process's real RSS (it runs in
    the test's process), read as the request is answered."""
    rss = psutil.Process().memory_info().rss
    return ("# HELP app_info evalq test stand-in, not a Qdrant server\n"
            "# TYPE app_info gauge\n"
            f'app_info{{name="qdrant-standin",version="{version("qdrant-edge-py")}"}} 1\n'
            "# HELP memory_resident_bytes the stand-in process's RSS\n"
            "# TYPE memory_resident_bytes gauge\n"
            f"memory_resident_bytes {rss}\n"
            "# HELP memory_allocated_bytes the stand-in process's RSS\n"
            "# TYPE memory_allocated_bytes gauge\n"
            f"memory_allocated_bytes {rss}\n")


def _route(s: QdrantStandIn, method: str, name: str, rest: str, body: dict[str, Any],
           raw: str) -> tuple[int, Any]:
    """(status, result or error message) of one collection request."""
    collection = s.collections.get(name)
    if rest == "/exists" and method == "GET":
        return 200, {"exists": collection is not None}
    if rest == "" and method == "PUT":
        if collection is not None:
            return 400, f"Wrong input: Collection `{name}` already exists!"
        s.create(name, body)
        return 200, True
    if collection is None:
        return 404, f"Not found: Collection `{name}` doesn't exist!"
    if rest == "" and method == "GET":
        return 200, collection.info()
    if rest == "" and method == "PATCH":  # update_collection: starts pending optimizations
        collection.grey, collection.dirty = False, True
        return 200, True
    if rest == "" and method == "DELETE":
        s.delete(name)
        return 200, True
    if rest == "/points" and method == "PUT":
        return 200, _upsert(collection, body)
    if rest == "/points" and method == "POST":
        found = collection.shard.retrieve([int(i) for i in body["ids"]], False, False)
        return 200, [{"id": int(r.id)} for r in found]
    if rest == "/points/count" and method == "POST":
        return 200, {"count": int(collection.shard.info().points_count)}
    if rest == "/points/query" and method == "POST":
        return _query(collection, body)
    if rest == "/points/scroll" and method == "POST":
        return 200, _scroll(collection, body)
    return 404, f"Not found: {method} {raw}"


def _upsert(collection: _Collection, body: dict[str, Any]) -> dict[str, Any]:
    batch = body.get("batch") or {}
    rows: list[tuple[Any, Any, Any]] = (
        list(zip(batch["ids"], batch["vectors"], batch.get("payloads") or
                 [None] * len(batch["ids"]))) if "batch" in body
        else [(p["id"], p["vector"], p.get("payload")) for p in body["points"]])
    points = [qe.Point(int(i), [float(x) for x in v], payload) for i, v, payload in rows]
    collection.shard.update(qe.UpdateOperation.upsert_points(points))
    collection.dirty = True
    return {"operation_id": 0, "status": "completed"}


def _scroll(collection: _Collection, body: dict[str, Any]) -> dict[str, Any]:
    """``ScrollResult``: a page of points in id order, with the payload keys asked for
    (``with_payload``: true, false or a list of keys) and the vectors when asked."""
    if collection.shard is None:
        return {"points": [], "next_page_offset": None}
    wanted = body.get("with_payload", True)
    records, offset = collection.shard.scroll(qe.ScrollRequest(
        limit=int(body.get("limit") or 10), offset=body.get("offset"),
        with_payload=wanted is not False, with_vector=bool(body.get("with_vector"))))
    points = []
    for r in records:
        payload = r.payload or {}
        if isinstance(wanted, list):
            payload = {k: v for k, v in payload.items() if k in wanted}
        points.append({"id": int(r.id), "payload": payload if wanted is not False else None,
                       "vector": list(r.vector) if body.get("with_vector") else None})
    return {"points": points, "next_page_offset": None if offset is None else int(offset)}


def _query(collection: _Collection, body: dict[str, Any]) -> tuple[int, Any]:
    query = body.get("query")
    vector = query.get("nearest") if isinstance(query, dict) else query
    if not isinstance(vector, list) or len(vector) != collection.size:
        return 400, (f"Wrong input: Vector dimension error: expected dim: {collection.size}, "
                     f"got {len(vector) if isinstance(vector, list) else vector!r}")
    p = body.get("params") or {}
    q = p.get("quantization")
    params = qe.SearchParams(
        hnsw_ef=p.get("hnsw_ef"), exact=bool(p.get("exact", False)),
        quantization=None if q is None else qe.QuantizationSearchParams(
            ignore=bool(q.get("ignore", False)), rescore=q.get("rescore"),
            oversampling=q.get("oversampling")))
    found = collection.shard.search(qe.SearchRequest(
        query=qe.Query.Nearest([float(x) for x in vector]), limit=int(body.get("limit", 10)),
        params=params))
    return 200, {"points": [{"id": int(p.id), "version": 0, "score": float(p.score)}
                            for p in found]}


def _quantization(config: dict[str, Any] | None) -> Any:
    if not config:
        return None
    if "scalar" in config:
        return qe.ScalarQuantizationConfig(type=qe.ScalarType.Int8,
                                           quantile=config["scalar"].get("quantile"))
    if "binary" in config:
        encoding = {"one_bit": "OneBit", "one_and_half_bits": "OneAndHalfBits",
                    "two_bits": "TwoBits"}[config["binary"].get("encoding") or "one_bit"]
        return qe.BinaryQuantizationConfig(
            encoding=getattr(qe.BinaryQuantizationEncoding, encoding))
    return qe.ProductQuantizationConfig(
        compression=getattr(qe.CompressionRatio, config["product"]["compression"].upper()))


def _holds(body: Any, dotted: str) -> bool:
    """Whether a request body sets the dotted option (``quantization_config.binary``)."""
    node = body
    for part in dotted.split("."):
        if not isinstance(node, dict) or node.get(part) is None:
            return False
        node = node[part]
    return True
