"""A local HTTP server speaking TEI's ``/info`` + ``/embed`` and OpenAI's ``/v1/embeddings``.

text-embeddings-inference cannot run on these machines, so the TEI client is tested
against this stand-in. It follows TEI's documented request/response schema (``inputs``,
``normalize``, ``truncate``, ``truncation_direction``, ``prompt_name``; 413 for too many
inputs or, without ``truncate``, over-length inputs; ``/info`` fields) and computes real
embeddings with the real MiniLM through sentence-transformers — so the vectors it
returns are the ones a correct TEI would return for this model. It also records every
request (for asserting what the client sent), can require a bearer key, can answer with
injected error statuses, and can die after N answers (to test mid-run failure).
"""

from __future__ import annotations

import base64
import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np


@dataclass
class Recorded:
    path: str
    payload: Any
    authorization: str | None


@dataclass
class FakeState:
    model: Any  # SentenceTransformer
    model_id: str = "sentence-transformers/all-MiniLM-L6-v2"
    pooling: str = "mean"
    max_input_length: int = 256
    max_client_batch_size: int = 8
    api_key: str | None = None
    fail_next: list[int] = field(default_factory=list)
    die_after: int | None = None  # answered embedding requests before shutting down
    # OpenAI `dimensions`: a Matryoshka model truncates then normalizes; any other model
    # answers 400 with vLLM's wording
    matryoshka: bool = True
    # Deployment faults `evalq verify` must name: OpenAI replies without normalization,
    # inputs truncated at this many tokens, a query instruction dropped from the inputs.
    serve_unnormalized: bool = False
    serve_max_tokens: int | None = None
    drop_prefix: str | None = None
    requests: list[Recorded] = field(default_factory=list)
    answered: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class FakeEmbeddingServer:
    def __init__(self, state: FakeState) -> None:
        self.state = state
        handler = _make_handler(self)
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        # Handler threads are joined on close: one still inside torch when the interpreter
        # exits aborts the process ("terminate called without an active exception").
        self.httpd.daemon_threads = False
        self.httpd.block_on_close = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._stopped = False
        self._closed = threading.Event()

    def start(self) -> FakeEmbeddingServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and wait for every request in flight (also when a dying server's
        own thread got here first)."""
        if self._stopped:
            self._closed.wait(timeout=120)
            return
        self._stopped = True
        self.httpd.shutdown()
        self.httpd.server_close()
        self._closed.set()

    def embed(self, texts: list[str], *, normalize: bool, direction: str,
              drop_normalize_layer: bool = False) -> np.ndarray:
        """Real MiniLM embeddings with TEI's truncation semantics (special tokens kept).
        ``drop_normalize_layer``: without the model's own Normalize module too (a server
        that does not normalize at all)."""
        model = self.state.model
        if drop_normalize_layer and type(model[-1]).__name__ == "Normalize":
            from sentence_transformers import SentenceTransformer

            model = SentenceTransformer(modules=list(model)[:-1], device="cpu")
        tokenizer = self.state.model.tokenizer
        with self.state.lock:  # the truncation side is tokenizer state
            previous = tokenizer.truncation_side
            longest = self.state.model.max_seq_length
            tokenizer.truncation_side = direction.lower()
            if self.state.serve_max_tokens is not None:
                self.state.model.max_seq_length = self.state.serve_max_tokens
            try:
                return model.encode(
                    texts, normalize_embeddings=normalize, convert_to_numpy=True
                ).astype(np.float32)
            finally:
                tokenizer.truncation_side = previous
                self.state.model.max_seq_length = longest

    def token_count(self, text: str) -> int:
        return len(self.state.model.tokenizer(text)["input_ids"])


def _make_handler(server: FakeEmbeddingServer) -> type[BaseHTTPRequestHandler]:
    state = server.state

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorized(self) -> bool:
            if state.api_key is None:
                return True
            return self.headers.get("Authorization") == f"Bearer {state.api_key}"

        def _injected_failure(self) -> bool:
            with state.lock:
                status = state.fail_next.pop(0) if state.fail_next else None
            if status is None:
                return False
            self._send(status, {"error": f"injected {status}", "error_type": "Overloaded"})
            return True

        def do_GET(self) -> None:
            state.requests.append(Recorded(self.path, None, self.headers.get("Authorization")))
            if not self._authorized():
                self._send(401, {"error": "unauthorized"})
            elif self.path == "/info":
                self._send(200, {
                    "model_id": state.model_id,
                    "model_sha": None,
                    "model_dtype": "float32",
                    "model_type": {"embedding": {"pooling": state.pooling}},
                    "max_concurrent_requests": 512,
                    "max_input_length": state.max_input_length,
                    "max_batch_tokens": 16384,
                    "max_client_batch_size": state.max_client_batch_size,
                    "auto_truncate": False,
                    "tokenization_workers": 1,
                    "version": "fake-for-tests",
                })  # fmt: skip
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            payload = json.loads(self.rfile.read(length) or b"null")
            state.requests.append(Recorded(self.path, payload, self.headers.get("Authorization")))
            if not self._authorized():
                self._send(401, {"error": "unauthorized"})
                return
            if self._injected_failure():
                return
            if self.path == "/embed":
                self._tei_embed(payload)
            elif self.path == "/v1/embeddings":
                self._openai_embed(payload)
            else:
                self._send(404, {"error": "not found"})
                return
            with state.lock:
                state.answered += 1
                die = state.die_after is not None and state.answered >= state.die_after
            if die:
                threading.Thread(target=server.stop, daemon=True).start()

        def _tei_embed(self, payload: dict[str, Any]) -> None:
            inputs = payload["inputs"]
            inputs = [inputs] if isinstance(inputs, str) else inputs
            if len(inputs) > state.max_client_batch_size:
                self._send(413, {
                    "error": f"batch size {len(inputs)} > maximum allowed batch size "
                             f"{state.max_client_batch_size}",
                    "error_type": "Validation",
                })  # fmt: skip
                return
            if not payload.get("truncate", False):
                for text in inputs:
                    n = server.token_count(text)
                    if n > state.max_input_length:
                        self._send(413, {
                            "error": f"Input validation error: inputs must have less than "
                                     f"{state.max_input_length} tokens. Given: {n}",
                            "error_type": "Validation",
                        })  # fmt: skip
                        return
            vectors = server.embed(
                inputs,
                normalize=bool(payload.get("normalize", True)),
                direction=payload.get("truncation_direction", "Right"),
            )
            self._send(200, vectors.tolist())

        def _openai_embed(self, payload: dict[str, Any]) -> None:
            inputs = payload["input"]
            inputs = [inputs] if isinstance(inputs, str) else inputs
            if state.drop_prefix:
                inputs = [t.removeprefix(state.drop_prefix) for t in inputs]
            dims = payload.get("dimensions")
            if dims is not None and not state.matryoshka:
                self._send(400, {"error": {
                    "message": f"Model {state.model_id!r} does not support Matryoshka "
                               f"embeddings; dimensions must be unset (received "
                               f"dimensions={dims}).",
                    "type": "BadRequestError", "code": 400}})
                return
            if dims is not None:
                raw = server.embed(inputs, normalize=False, direction="Right")[:, :dims]
                vectors = raw / np.linalg.norm(raw, axis=1, keepdims=True)
            else:
                vectors = server.embed(inputs, normalize=not state.serve_unnormalized,
                                       direction="Right",
                                       drop_normalize_layer=state.serve_unnormalized)
            fmt = payload.get("encoding_format", "float")
            data = []
            for i, vec in enumerate(vectors):
                emb: Any = vec.tolist()
                if fmt == "base64":
                    emb = base64.b64encode(vec.astype("<f4").tobytes()).decode()
                data.append({"object": "embedding", "index": i, "embedding": emb})
            data.reverse()  # the client must order by "index", not by position
            self._send(200, {
                "object": "list", "data": data, "model": payload.get("model"),
                "usage": {"prompt_tokens": 0, "total_tokens": 0},
            })  # fmt: skip

    return Handler


@contextmanager
def fake_server(state: FakeState) -> Iterator[FakeEmbeddingServer]:
    server = FakeEmbeddingServer(state).start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def silent_server() -> Iterator[str]:
    """A port that accepts connections and never answers (the timeout case)."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
                held.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=2)
        for conn in held:
            conn.close()
        listener.close()


def refused_url() -> str:
    """A loopback URL whose port has nothing listening (connection refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"
