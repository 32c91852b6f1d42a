"""A local HTTP server speaking TEI's ``/info`` + ``/rerank`` and the Cohere/Jina-style
``/v1/rerank`` (the schema vLLM and Infinity answer).

text-embeddings-inference cannot run on these machines (no Docker, no Rust build), so the
rerank clients are tested against this stand-in. It follows the documented schemas — TEI:
request ``query``, ``texts``, ``raw_scores``, ``truncate``, ``truncation_direction``,
``return_text``; answer a list of ``{"index", "score"}`` sorted by score descending. Cohere
/ Jina / vLLM: request ``model``, ``query``, ``documents``, ``top_n``,
``return_documents``; answer ``{"results": [{"index", "relevance_score"}]}`` sorted by
score; vLLM's ``/score``: request ``queries``, ``documents``; answer ``{"data": [{"index",
"object", "score"}]}`` in request order — and computes real scores with
sentence-transformers' ``CrossEncoder`` on the fixture checkpoint, so what it returns is
what a correct server would return for it. It records requests and can be told to drop a
result, or to rewrite its answer (``rewrite(path, body) -> body``: a server that lies).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from support.loopback import LoopbackServer


@dataclass
class RerankState:
    model: Any  # sentence_transformers.CrossEncoder
    model_id: str = "evalq/minilm-cross-encoder-fixture"
    max_client_batch_size: int = 8
    drop_one: bool = False  # answer one result fewer than texts sent
    rewrite: Callable[[str, Any], Any] | None = None  # change the answer before it is sent
    requests: list[tuple[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class FakeRerankServer(LoopbackServer):
    def __init__(self, state: RerankState) -> None:
        self.state = state
        super().__init__(_make_handler(self))

    def scores(self, query: str, texts: list[str], raw: bool) -> list[float]:
        import torch

        activation = torch.nn.Identity() if raw else torch.nn.Sigmoid()
        with self.state.lock:
            values = self.state.model.predict([(query, t) for t in texts],
                                              activation_fn=activation, batch_size=32)
        return [float(v) for v in values]


def _make_handler(server: FakeRerankServer) -> type[BaseHTTPRequestHandler]:
    state = server.state

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _send(self, status: int, body: Any) -> None:
            if status == 200 and state.rewrite is not None and self.command == "POST":
                body = state.rewrite(self.path, body)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/info":
                self._send(200, {"model_id": state.model_id, "model_sha": None,
                                 "model_dtype": "float32",
                                 "model_type": {"reranker": {"id2label": {"0": "LABEL_0"}}},
                                 "max_input_length": 256,
                                 "max_client_batch_size": state.max_client_batch_size,
                                 "version": "fake"})
            else:
                self._send(404, {"error": "not found"})

        def do_POST(self) -> None:
            payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            state.requests.append((self.path, payload))
            if self.path == "/rerank":
                texts = payload["texts"]
                if len(texts) > state.max_client_batch_size:
                    self._send(413, {"error": "batch size too large",
                                     "error_type": "Validation"})
                    return
                scores = server.scores(payload["query"], texts, bool(payload.get("raw_scores")))
                items = [{"index": i, "score": s} for i, s in enumerate(scores)]
                items.sort(key=lambda x: -x["score"])
                self._send(200, items[:-1] if state.drop_one else items)
            elif self.path == "/v1/rerank":
                docs = payload["documents"]
                scores = server.scores(payload["query"], docs, False)
                items = [{"index": i, "relevance_score": s} for i, s in enumerate(scores)]
                items.sort(key=lambda x: -x["relevance_score"])
                items = items[:payload.get("top_n") or len(items)]
                self._send(200, {"id": "fake", "model": payload.get("model"),
                                 "results": items[:-1] if state.drop_one else items,
                                 "usage": {"total_tokens": 0}})
            elif self.path == "/score":
                docs = payload["documents"]
                scores = server.scores(payload["queries"], docs, False)
                items = [{"index": i, "object": "score", "score": s}
                         for i, s in enumerate(scores)]
                self._send(200, {"id": "fake", "object": "list", "model": payload.get("model"),
                                 "data": items[:-1] if state.drop_one else items,
                                 "usage": {"total_tokens": 0}})
            else:
                self._send(404, {"error": "not found"})

    return Handler
