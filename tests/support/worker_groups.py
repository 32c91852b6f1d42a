"""Two pytest-xdist workers on the CI machine's two cores, with each shared server,
engine or database in exactly one of them.

Most of the suite is single-threaded Python (imports, tokenizing, pydantic, subprocesses
starting), so a serial run leaves a core idle much of the time. Running two workers
must not start a session fixture twice, though (a second vLLM engine, a second embedded
PostgreSQL), nor split the tests whose order matters (the vLLM server is killed after
its last user, the reranker engines close the embedding engine). So every test gets a
*group*: the shared fixtures it uses decide it, and a test using none is grouped with
its module (module fixtures built once). xdist sends each group whole to one worker, in
collection order.

xdist's own ``--dist loadgroup`` puts the group into the test's node id, which pytest 9
no longer lets it do (``Node.nodeid`` is derived, ``_nodeid`` is ignored), so the groups
take another road: each worker writes the map of node id to group to a file the
controller names (:data:`GROUPS_ENV`), and the controller's scheduler reads it once the
workers' collections are in (they write it while collecting, before reporting).

A pytest plugin (``pytest_plugins`` in tests/conftest.py), whole in this module, so that
tests/project/test_worker_groups.py can run it on a small suite of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

GROUPS_ENV = "EVALQ_TEST_WORKER_GROUPS"

# Session fixtures that start something expensive, by the group that owns them. The
# first match wins: a test using the vLLM engine and the report runs runs with vLLM.
SHARED_BY: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vllm", ("vllm_engine", "vllm_server", "vllm_engine_pool", "minilm_w8a8")),
    ("report-runs", ("report_runs", "pipeline_run")),
    ("vdb", ("pg", "qdrant_root", "qdrant_standin")),
    ("rerank", ("rerank_server", "cross_encoder_path")),
    ("decoder", ("decoder_path", "decoder_settings")),
)
# Groups whose fixtures only compute files in the worker's own temporary folders (recipe
# runs, a fixture checkpoint): a test of another group that uses them builds a second
# copy in its own worker, which costs time, not correctness (the vLLM group's certificate
# and decoder tests do). The others hold a server, an engine's memory or a database's
# data folder, and must start once: no test may use them from another group.
REBUILT_ELSEWHERE = ("report-runs", "decoder")


def group_of(item: pytest.Item) -> str:
    """The worker group of one collected test."""
    if item.get_closest_marker("vllm") is not None:
        return "vllm"
    names = getattr(item, "fixturenames", ())
    for group, fixtures in SHARED_BY:
        if any(name in names for name in fixtures):
            return group
    return item.nodeid.split("::", 1)[0]


def pytest_configure(config: pytest.Config) -> None:
    """In the controller of a distributed run: name the file the workers write."""
    if hasattr(config, "workerinput") or not config.pluginmanager.hasplugin("xdist"):
        return
    if not config.getoption("numprocesses", None):
        return
    folder = Path(tempfile.mkdtemp(prefix="evalq-test-groups-"))
    os.environ[GROUPS_ENV] = str(folder / "groups.json")
    config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a worker: write the groups of its collection (every worker collects the same
    tests, so the first file written is the map; later ones replace it atomically).
    Last, after the conftest has ordered the items."""
    target = os.environ.get(GROUPS_ENV)
    if not target or not hasattr(config, "workerinput"):
        return
    groups = {item.nodeid: group_of(item) for item in items}
    part = Path(f"{target}.{config.workerinput['workerid']}")
    part.write_text(json.dumps(groups))
    part.replace(target)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """The controller's scheduler under ``--dist loadgroup``: xdist's scope scheduling,
    with our groups as scopes (any other ``--dist`` keeps xdist's own)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByGroup(LoadScopeScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                self.groups = json.loads(Path(os.environ[GROUPS_ENV]).read_text())
            return self.groups[nodeid]  # every worker collected every node id

    return ByGroup(config, log)
