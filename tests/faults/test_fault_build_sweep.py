"""Fault class "a killed build leaves its work behind": SIGKILL during a graph build (the
ONNX export, an int8 derivation, an IR conversion) left the build's private folder, tens of
MB, in ``<cache_dir>/checkpoints``, and no later run removed it. Build folders now carry
their builder's host and pid, and the next build beside them removes those whose builder
is gone, never a live one's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from evalq.core.atomicio import built_folder, sweep_stale_builds

ROOT = Path(__file__).resolve().parents[2]

_KILLED_BUILD = """
import sys, time
from pathlib import Path
from evalq.core.atomicio import built_folder

def build(work):
    (work / "model.onnx").write_bytes(b"x" * 1_000_000)
    print("building", flush=True)
    time.sleep(120)

built_folder(Path(sys.argv[1]), build, complete=lambda f: (f / "done").is_file())
"""


def _write(work: Path) -> str:
    (work / "done").write_text("ok")
    return "built"


@pytest.mark.process
def test_a_build_killed_mid_way_is_swept_by_the_next(tmp_path: Path) -> None:
    target = tmp_path / "checkpoints" / "graph-ort-dynamic-int8-0123"
    child = subprocess.Popen([sys.executable, "-c", _KILLED_BUILD, str(target)],
                             stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT / "eval")})
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "building"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    left = [p for p in target.parent.iterdir() if p.name.startswith(".")]
    assert len(left) == 1 and (left[0] / "model.onnx").is_file()  # what SIGKILL leaves
    assert built_folder(target, _write, complete=lambda f: (f / "done").is_file()) == "built"
    assert [p.name for p in target.parent.iterdir()] == [target.name]


def test_a_live_build_and_other_folders_are_left_alone(tmp_path: Path) -> None:
    other_host = tmp_path / ".graph-b.build-elsewhere-1-abc123"
    not_a_build = tmp_path / ".not-a-build"
    for folder in (other_host, not_a_build):
        folder.mkdir()

    def build(work: Path) -> list[Path]:
        swept = sweep_stale_builds(tmp_path)  # while this build is running
        assert work.is_dir()
        (work / "done").write_text("ok")
        return swept

    assert built_folder(tmp_path / "graph-a", build,
                        complete=lambda f: (f / "done").is_file()) == []
    assert other_host.is_dir() and not_a_build.is_dir()
