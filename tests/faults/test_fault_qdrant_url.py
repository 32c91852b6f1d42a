"""Fault class "a Qdrant URL the client cannot parse" (issue 32): ``url:
http://127.0.0.1:99999`` (a port out of range) or ``http://[::1`` (an unclosed bracket)
passed the plan, and the run ended in the client's LocationParseError, an exit 3 after
the reference had encoded. Both the ``index:`` kind and a ``documents: {qdrant: ...}``
source are refused at plan time, naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from faultkit import no_traceback, run_cli, write_recipe

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
