"""The vector databases the retrieve tests share: the session's one embedded PostgreSQL
+ pgvector (``pg``), one folder for Qdrant's shards (``qdrant_root``), used by
test_vdb_kinds.py and test_vdb_sweep.py, and one stand-in for a Qdrant server
(``qdrant_standin``, tests/support/qdrant_standin.py: a real server cannot run here),
used by test_vdb_qdrant_url.py; ``pg_folder`` is a test's own data folder; ``exact``, the
exact FAISS search of a module's own ``DOCS`` and ``QUERIES`` at its ``K``, which the
index kinds' rankings are measured against (test_vdb_kinds.py, test_vdb_qdrant_url.py)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalq.core.ranking import Ranking
from evalq.retrieve import pg_server
from evalq.retrieve.exact import ExactOptions
from evalq.retrieve.registry import INDEX_KINDS


@pytest.fixture(scope="session")
def pg() -> Iterator[pg_server.Database]:
    """The session's embedded PostgreSQL (allowed as root: the test machines run as
    root, and the folder is a temporary one)."""
    yield pg_server.embedded(None, allow_root=True, where="test")


def _own_folder() -> Iterator[Path]:
    """A folder outside pytest's numbered temporary folders, which another pytest session
    of the same user may rotate away while a server still writes in it."""
    folder = Path(tempfile.mkdtemp(prefix="evalq-vdb-test-"))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session")
def qdrant_root() -> Iterator[Path]:
    yield from _own_folder()


@pytest.fixture(scope="session")
def qdrant_standin() -> Iterator[Any]:
    """The session's stand-in Qdrant server (its collections outlive each test, as a
    team's server's do; tests name their own collections or use their own vectors).
    Imported here: the stand-in loads Qdrant's engine, which the fast tier never needs."""
    from support.qdrant_standin import QdrantStandIn

    server = QdrantStandIn()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def pg_folder() -> Iterator[Path]:
    """A data folder's parent for a test's own embedded PostgreSQL."""
    yield from _own_folder()


@pytest.fixture(scope="module")
def exact(request: pytest.FixtureRequest) -> Ranking:
    """The exact search of the requesting module's ``DOCS`` and ``QUERIES`` at its ``K``
    (a module may define its own ``exact`` instead)."""
    module = request.module
    index = INDEX_KINDS.build(ExactOptions(), module.DOCS, where="test")
    try:
        return index.search(module.QUERIES, module.K)
    finally:
        index.close()
