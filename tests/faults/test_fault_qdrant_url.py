"""Fault class "a Qdrant URL the client cannot parse" (issue 32): ``url:
http://127.0.0.1:99999`` (a port out of range) or ``http://[::1`` (an unclosed bracket)
passed the plan, and the run ended in the client's LocationParseError, an exit 3 after
the reference had encoded. Both the ``index:`` kind and a ``documents: {qdrant: ...}``
source are refused at plan time, naming the field."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from faultkit import no_traceback, run_cli, write_recipe

from support.loopback import LoopbackServer

URLS = ["http://127.0.0.1:99999", "http://[::1", "http://:6333", "http://127.0.0.1:0"]


def _index(url: str) -> dict[str, Any]:
    return {"name": "q", "index": {"kind": "qdrant", "url": url}}


def _documents(url: str) -> dict[str, Any]:
    return {"name": "q", "documents": {"qdrant": {"url": url, "collection": "docs"}}}


@pytest.mark.parametrize("url", URLS)
@pytest.mark.parametrize("where", [_index, _documents])
def test_an_unparsable_url_is_refused_at_plan_time(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], url: str, where: Any) -> None:
    path = write_recipe(tmp_path, candidates=[where(url)])
    result = run_cli(capsys, "validate", str(path))
    assert result.code == 2, result.err
    assert no_traceback(result.err) and str(path) in result.err
    assert "candidates.0." in result.err and "localhost:6333" in result.err


class _Page(BaseHTTPRequestHandler):
    """Every request answered with a web page: what a url names when it points at
    another service (a dashboard, a proxy's login page)."""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _page(self) -> None:
        body = b"<!DOCTYPE html><html><body>Grafana</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_PATCH = _page


def test_a_url_that_is_no_qdrant_is_refused_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A server that answers 200 with a web page: qdrant-client's JSON decoder error went
    through as an exit 3, at plan time for a documents: source and after the reference
    had encoded for the index kind."""
    import numpy as np

    from evalq.core.errors import InputError
    from evalq.retrieve.kinds import Documents
    from evalq.retrieve.qdrant_options import QdrantOptions
    from evalq.retrieve.registry import INDEX_KINDS

    with LoopbackServer(_Page) as page:
        path = write_recipe(tmp_path, candidates=[_documents(page.url)])
        result = run_cli(capsys, "plan", str(path))
        assert result.code == 2, result.err
        assert no_traceback(result.err) and "candidates.0.documents.qdrant.url" in result.err
        assert "not as Qdrant's REST API" in result.err and "6333" in result.err
        docs = Documents(ids=("a", "b"), vectors=np.eye(2, 4, dtype=np.float32))
        with pytest.raises(InputError) as caught:
            INDEX_KINDS.build(QdrantOptions(url=page.url), docs, where="candidates.q.index")
    assert caught.value.field == "candidates.q.index.url"
    assert "Grafana" in caught.value.message
