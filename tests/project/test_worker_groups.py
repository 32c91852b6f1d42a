"""The two-worker split of ``make test`` (tests/support/worker_groups.py) keeps its promise.

Breakage would not fail a test of the suite itself: a second worker starting its own
embedded PostgreSQL or vLLM engine only makes the run slower (or, on a shared data
folder, flaky). So the split is run here on a small suite of its own, through the real
xdist controller and workers, and the real collection is checked for a test that two
groups would both claim.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from support.worker_groups import REBUILT_ELSEWHERE, SHARED_BY, group_of

TESTS = Path(__file__).resolve().parents[1]

_CONFTEST = '''
import json, os
from pathlib import Path
import pytest

pytest_plugins = ("support.worker_groups",)
LOG = Path(os.environ["GROUPS_PROBE_LOG"])

def _log(**entry):
    with LOG.open("a") as f:
        f.write(json.dumps(entry) + "\\n")

@pytest.fixture(scope="session")
def pg():
    _log(started="pg", worker=os.environ.get("PYTEST_XDIST_WORKER"))
    return "db"

@pytest.fixture(autouse=True)
def _where(request):
    _log(test=request.node.nodeid, worker=os.environ.get("PYTEST_XDIST_WORKER"))
'''


def _probe_suite(root: Path) -> None:
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "conftest.py").write_text(_CONFTEST)
    for module in ("test_db_a", "test_db_b"):  # two modules sharing one session database
        (root / f"{module}.py").write_text("".join(
            f"def test_{i}(pg):\n    assert pg == 'db'\n" for i in range(4)))
    for module in ("test_plain_a", "test_plain_b", "test_plain_c"):
        (root / f"{module}.py").write_text("".join(
            f"def test_{i}():\n    pass\n" for i in range(6)))


@pytest.mark.process
def test_a_shared_database_starts_once_and_each_group_runs_on_one_worker(
        tmp_path: Path) -> None:
    suite, log = tmp_path / "suite", tmp_path / "log.jsonl"
    suite.mkdir()
    _probe_suite(suite)
    env = {**os.environ, "GROUPS_PROBE_LOG": str(log),
           "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-q",
         "-p", "no:cacheprovider", "--rootdir", str(suite), str(suite)],
        cwd=suite, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    entries = [json.loads(line) for line in log.read_text().splitlines()]
    started = [e["worker"] for e in entries if "started" in e]
    assert len(started) == 1, f"the session database started on workers {started}"
    workers_of: dict[str, set[str]] = defaultdict(set)
    for e in entries:
        if "test" in e:
            module = e["test"].split("::")[0]
            workers_of["pg" if module.startswith("test_db") else module].add(e["worker"])
    assert len([e for e in entries if "test" in e]) == 2 * 4 + 3 * 6
    assert {group: len(w) for group, w in workers_of.items()} == {
        "pg": 1, "test_plain_a.py": 1, "test_plain_b.py": 1, "test_plain_c.py": 1}
    # and the two cores are both used: the groups are spread over the two workers
    assert set().union(*workers_of.values()) == {"gw0", "gw1"}


def test_no_test_uses_a_server_or_database_of_another_group(
        request: pytest.FixtureRequest) -> None:
    """A test using, say, the vLLM engine and the embedded PostgreSQL runs in the vLLM
    group, and would start a second PostgreSQL beside the database group's: the table in
    worker_groups must then say which group owns both. Only fixtures that compute files
    (``REBUILT_ELSEWHERE``) may be used from another group, at the cost of a copy."""
    owners = {name: group for group, names in SHARED_BY for name in names}
    claimed = []
    for item in request.session.items:
        groups = {owners[f] for f in getattr(item, "fixturenames", ()) if f in owners}
        if item.get_closest_marker("vllm") is not None:
            groups.add("vllm")
        foreign = groups - {group_of(item)} - set(REBUILT_ELSEWHERE)
        if foreign:
            claimed.append(f"{item.nodeid}: uses {sorted(foreign)}, runs in {group_of(item)}")
    assert claimed == []
