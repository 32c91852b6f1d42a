"""``evalq load`` into a results folder whose ``.evalq.lock`` another evalq holds is refused
like ``evalq run`` (issue 32, UNCLEAR case lock_held_load): exit 2 naming the folder and
the holder, before any request is sent; it used to run (and exit 1)."""

from __future__ import annotations

from pathlib import Path

import pytest
from faultkit import no_traceback, run_cli

from evalq.results.rundir import RunLock
from support import recipes
from support.load_test_server import Behaviour, LoadTestServer

HERE = Path(__file__).resolve().parents[1]


def _recipe(tmp_path: Path, url: str) -> Path:
    return recipes.write(tmp_path / "recipe.yaml", recipes.recipe(
        "load-lock", datasets=["pydocs"], queries=20, docs=40,
        reference={"name": "fp32", "backend": "inprocess"},
        candidates=[{"name": "srv", "backend": "openai", "http": {"url": url, "model": "t"}}],
        load={"warmup_s": 0, "duration_s": 0.3, "max_requests": 10, "timeout_s": 2,
              "parity": False, "workloads": [{"name": "q", "kind": "query",
                                              "slo_p99_ms": 2000,
                                              "open_loop": {"rates": [10]}}]}))


def test_a_load_into_a_locked_folder_is_refused(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(HERE.parent)  # datasets/ manifests are found from the repo root
    out = tmp_path / "out"
    lock = RunLock(out)
    lock.acquire()
    try:
        with LoadTestServer(Behaviour()) as server:
            result = run_cli(capsys, "load", str(_recipe(tmp_path, server.url)), "-o", str(out))
            sent = server.counters.requests
    finally:
        lock.release()
    assert result.code == 2, result.out + result.err
    assert "another evalq run is writing this results folder" in result.err
    assert str(out) in result.err and no_traceback(result.err)
    assert sent == 0 and not (out / "load").exists()


def test_the_lock_is_released_after_a_load(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(HERE.parent)
    out = tmp_path / "out"
    with LoadTestServer(Behaviour()) as server:
        result = run_cli(capsys, "load", str(_recipe(tmp_path, server.url)), "-o", str(out))
    assert result.code in (0, 1), result.err
    assert not (out / ".evalq.lock").exists()
    again = RunLock(out)
    again.acquire()  # free again
    again.release()
