"""``evalq load`` against a URL where nothing listens: exit 2 naming the URL and the fix
before any level runs (issue 32: ld_unreachable ended in exit 1 'server errors 100% >
error budget')."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from evalq.app.cli import main
from support import recipes

HERE = Path(__file__).resolve().parents[1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_load_against_nothing_is_exit_2_naming_the_url(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(HERE.parent)  # datasets/ manifests are found from the repo root
    url = f"http://127.0.0.1:{_free_port()}"
    recipe = recipes.write(tmp_path / "recipe.yaml", recipes.recipe(
        "load-nothing", datasets=["pydocs"], queries=20, docs=40,
        reference={"name": "fp32", "backend": "inprocess"},
        candidates=[{"name": "srv", "backend": "openai",
                     "http": {"url": url, "model": "test"}}],
        load={"warmup_s": 0, "duration_s": 1, "max_requests": 20, "timeout_s": 5,
              "parity": False,
              "workloads": [{"name": "query", "kind": "query", "slo_p99_ms": 5000,
                             "open_loop": {"rates": [5]}}]}))
    code = main(["load", str(recipe), "-o", str(tmp_path / "out")])
    out = capsys.readouterr()
    text = out.out + out.err
    assert code == 2, text
    assert url in out.err and "http.url" in out.err and "start the server" in out.err
    assert "error budget" not in text and "level 5" not in text
