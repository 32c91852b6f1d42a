"""A loopback proxy in front of a real embedding server that makes it a faulty deployment.

Starting one vLLM server per fault costs minutes on the CI machine. vLLM's
``/v1/embeddings`` takes the settings the faults are about per request
(``use_activation``: normalization, ``truncate_prompt_tokens``: truncation), so this proxy
overrides them in every request body, or strips a query instruction from the inputs, and
the real server computes the vectors a deployment with that fault would serve. Every other
request passes through unchanged; the proxy records the bodies it forwarded.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx


@dataclass
class Fault:
    """What the proxy changes: ``fields`` override the request body's fields;
    ``strip_prefix`` is removed from the start of every input that has it."""

    fields: dict[str, Any] = field(default_factory=dict)
    strip_prefix: str | None = None
    forwarded: list[dict[str, Any]] = field(default_factory=list)


def _faulty(body: dict[str, Any], fault: Fault) -> dict[str, Any]:
    out = {**body, **fault.fields}
    if fault.strip_prefix and "input" in out:
        inputs = out["input"]
        out["input"] = (inputs.removeprefix(fault.strip_prefix) if isinstance(inputs, str)
                        else [t.removeprefix(fault.strip_prefix) for t in inputs])
    return out


def _handler(upstream: str, fault: Fault) -> type[BaseHTTPRequestHandler]:
    client = httpx.Client(base_url=upstream, timeout=120.0)

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        def _relay(self, response: httpx.Response) -> None:
            self.send_response(response.status_code)
            self.send_header("Content-Type",
                             response.headers.get("content-type", "application/json"))
            self.send_header("Content-Length", str(len(response.content)))
            self.end_headers()
            self.wfile.write(response.content)

        def do_GET(self) -> None:
            self._relay(client.get(self.path))

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = json.loads(raw or b"null")
            if self.path.rstrip("/").endswith("/embeddings") and isinstance(body, dict):
                body = _faulty(body, fault)
                fault.forwarded.append(body)
            self._relay(client.post(self.path, json=body))

    return Handler


@contextmanager
def fault_proxy(upstream: str, fault: Fault) -> Iterator[str]:
    """The proxy's root URL while the block runs (``upstream``: the server's root)."""
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(upstream.rstrip("/"), fault))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=10)
