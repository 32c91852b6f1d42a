"""Fault class "a database server's /metrics page that is no figure" (issue 32):
``evalq load``'s database stage reads Qdrant's memory gauges while it searches. A gauge of
``1e999`` became a step's infinite "peak" memory, a negative one a negative peak, and a
page dripped a few bytes at a time, or endless, held the step for as long as the server
kept sending (each read beat the per-read timeout)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from evalq.retrieve import serverwatch

GOOD = "memory_resident_bytes 73400320\nmemory_allocated_bytes 1048576\n"


class _Metrics(BaseHTTPRequestHandler):
    page = b""
    status = 200
    drip_s = 0.0
    repeat = 1

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(self.status)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        try:
            for _ in range(self.repeat):
                for i in range(0, len(self.page), 16 if self.drip_s else len(self.page) or 1):
                    self.wfile.write(self.page[i:i + (16 if self.drip_s else len(self.page))])
                    self.wfile.flush()
                    time.sleep(self.drip_s)
        except OSError:
            pass


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Metrics]]]:
    handler = type("Handler", (_Metrics,), {})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/metrics", handler
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize("page", [
    "memory_resident_bytes 1e999\n", "memory_resident_bytes -5\n",
    "memory_resident_bytes -1e999\n", "memory_allocated_bytes 1e30\n",
    "<html><body>memory_resident_bytes</body></html>", "\x00\xff garbage", ""])
def test_a_gauge_that_is_no_byte_count_is_no_figure(page: str) -> None:
    assert serverwatch.memory_figures(page) == {}


@pytest.mark.parametrize("status,page", [(500, GOOD), (200, "<html>oops</html>"),
                                         (200, "memory_resident_bytes -3\n")])
def test_a_bad_answer_reads_as_none(server, status: int, page: str) -> None:
    url, handler = server
    handler.status, handler.page = status, page.encode()
    assert serverwatch._metrics_reader(url, {})() is None


def test_a_good_page_reads(server) -> None:
    url, handler = server
    handler.page = GOOD.encode()
    assert serverwatch._metrics_reader(url, {})() == {
        "memory_resident_bytes": 73400320.0, "memory_allocated_bytes": 1048576.0}


def test_a_dripped_page_is_given_up_at_the_deadline(server, monkeypatch) -> None:
    """The page arrives 16 bytes every 0.1 s, well over the (shortened) deadline; every
    read is quicker than the per-read timeout, so only a deadline for the page ends it."""
    url, handler = server
    handler.page, handler.drip_s = (GOOD * 40).encode(), 0.1
    monkeypatch.setattr(serverwatch, "_METRICS_TIMEOUT_S", 0.5)
    assert serverwatch._metrics_reader(url, {})() is None


def test_an_endless_page_is_cut_at_its_size_limit(server, monkeypatch) -> None:
    url, handler = server
    handler.page, handler.repeat = (b"# padding " * 100_000), 10_000
    monkeypatch.setattr(serverwatch, "_METRICS_MAX_BYTES", 2**20)
    assert serverwatch._metrics_reader(url, {})() is None
