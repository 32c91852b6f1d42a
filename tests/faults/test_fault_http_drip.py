"""Fault class "a server that answers a little at a time" (issue 32): httpx's timeout
bounds each read of the socket, so a server (or a proxy stuck behind a dying backend)
that sends its body a few bytes at a time was waited for without end: ``evalq verify
--url`` against one that sent 200 bytes every 3 s was still waiting after 15 minutes.
The whole answer now has to arrive within ``timeout_s``."""

from __future__ import annotations

import time
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from evalq.core.errors import InputError
from evalq.engines.http_common import HttpJsonClient, RetryPolicy
from support.loopback import LoopbackServer

BODY = b'{"data": [{"index": 0, "embedding": [0.0]}], "object": "list"}'


class _Drip(BaseHTTPRequestHandler):
    """Headers at once, then the body a byte every 0.2 s (about 13 s in all)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        try:
            for byte in BODY:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.2)
        except OSError:  # the client gave up: what it should do
            pass


def test_a_server_that_drips_its_answer_is_cut_off_at_timeout_s() -> None:
    with LoopbackServer(_Drip) as server:
        client = HttpJsonClient(server.url, policy=RetryPolicy(timeout_s=1.0, retries=0,
                                                               backoff_s=0.0))
        try:
            with pytest.raises(InputError) as caught:
                client.post_json("/v1/embeddings", {"input": ["x"], "model": "m"})
        finally:
            client.close()
    assert "no whole answer within timeout_s (1 s)" in caught.value.message
    assert server.url in caught.value.message and caught.value.fix
    # and it was cut off, not read whole: it says how much of the body had come
    assert "bytes of it so far" in caught.value.message
