"""Fault class "interrupted": SIGTERM (what CI runners and `timeout` send) is handled like
Ctrl-C in every phase: exit 143, manifest `interrupted`, finished work kept. Real signals
to a real `evalq run` process; the slow encoder and the statistics hook only decide
*when* the signal lands."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faultkit import ROOT, write_recipe

pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.model]

SLOW_ENCODER = """
import time, sys
from evalq.engines.inprocess import InProcessEncoder
_real = InProcessEncoder.embed
def slow(self, texts):
    time.sleep(0.4)
    return _real(self, texts)
InProcessEncoder.embed = slow
from evalq.app.cli import main
sys.exit(main(["run", sys.argv[1]]))
"""

TERM_IN_STATISTICS = """
import os, signal, sys, time
import evalq.execute.summarize
def build_summary(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)  # the handler interrupts this
evalq.execute.summarize.build_summary = build_summary
from evalq.app.cli import main
sys.exit(main(["run", sys.argv[1]]))
"""


def _start(script: str, recipe: Path) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "eval")}
    return subprocess.Popen([sys.executable, "-c", script, str(recipe)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(predicate, proc: subprocess.Popen[str], limit_s: float = 600) -> None:
    deadline = time.monotonic() + limit_s
    while not predicate():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run never reached the point to interrupt"
        time.sleep(0.05)


def test_sigterm_while_encoding(tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path)
    proc = _start(SLOW_ENCODER, recipe)
    chunks = tmp_path / "cache" / "embeddings"
    _wait_for(lambda: chunks.is_dir() and any(chunks.glob("*/*.npy")), proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err
    assert "terminated (SIGTERM)" in err and "Traceback" not in err
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["signal"] == "SIGTERM"
    assert any(chunks.glob("*/*.npy"))  # finished chunks kept for the rerun
    assert not (tmp_path / "out" / ".evalq.lock").exists()


def test_sigterm_during_statistics(tmp_path: Path) -> None:
    recipe = write_recipe(tmp_path)
    proc = _start(TERM_IN_STATISTICS, recipe)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 143, err
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["signal"] == "SIGTERM"
    assert set(manifest["variants"]) == {"fp32", "int8-vectors"}  # every variant kept
    for variant in ("fp32", "int8-vectors"):
        assert (tmp_path / "out" / "per_query" / "tiny" / f"{variant}.jsonl").is_file()
    assert not (tmp_path / "out" / "summary.json").exists()
