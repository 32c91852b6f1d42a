"""The server sampler's CPU seconds over a step, with processes leaving the tree.

A database's backends come and go during a load step. The sampler once took the
difference of the tree's total CPU seconds at the step's start and end, so a backend
that had worked before the step and exited during it made the step's CPU negative
(seen as ``cpu_s = -0.01`` for PostgreSQL under CI). These tests build such a tree
from real processes and hold the sampler's figures to what can be true of any host.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from evalq.execute.load.serverstats import ProcessSampler

# A parent that starts one child which burns CPU until told to stop, then idles itself.
_TREE = """
import subprocess, sys, time
from pathlib import Path
stop = Path(sys.argv[1])
child = subprocess.Popen([sys.executable, "-c",
    "import sys, pathlib\\nstop = pathlib.Path(sys.argv[1])\\n"
    "while not stop.exists():\\n    sum(range(20000))\\n", str(stop)])
child.wait()
time.sleep(600)
"""


def _child_cpu_s(parent: psutil.Process) -> float:
    children = parent.children()
    if not children:
        return 0.0
    t = children[0].cpu_times()
    return t.user + t.system


@pytest.fixture
def busy_tree(tmp_path: Path):
    stop = tmp_path / "stop"
    proc = subprocess.Popen([sys.executable, "-c", _TREE, str(stop)])
    try:
        yield proc, stop
    finally:
        stop.touch()
        proc.kill()
        proc.wait()


def _wait_until(check, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "the process tree did not get there in time"
        time.sleep(0.05)


def test_a_child_that_worked_and_exits_during_the_step_leaves_cpu_non_negative(
        busy_tree) -> None:
    proc, stop = busy_tree
    parent = psutil.Process(proc.pid)
    # the child has CPU seconds of its own before the step starts
    _wait_until(lambda: _child_cpu_s(parent) > 0.3)
    with ProcessSampler(proc.pid, interval_s=0.05) as sampler:
        time.sleep(0.3)  # a few samples while the child still works
        stop.touch()
        _wait_until(lambda: not parent.children())
    result = sampler.result
    # the difference of tree totals would be about -0.3 s here
    assert result["cpu_s"] > 0
    assert result["processes"] == 2
    assert result["peak_rss_mb"] > 0


def test_a_process_not_running_gives_zero_not_an_error() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    with ProcessSampler(proc.pid, interval_s=0.05) as sampler:
        time.sleep(0.1)
    assert sampler.result["cpu_s"] == 0
    assert sampler.result["processes"] == 0


def test_no_pid_is_reported_as_not_watched() -> None:
    with ProcessSampler(None) as sampler:
        pass
    assert sampler.result["cpu_s"] is None
    assert "not started by evalq" in sampler.result["note"]
