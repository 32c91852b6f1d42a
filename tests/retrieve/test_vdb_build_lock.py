"""Two builds of one pgvector key at once (issue 30): the ingest and index build of a
keyed table hold an advisory lock named by the key (evalq.retrieve.pg_lock), so a
second build waits, then finds the table complete and loads nothing. On the session's
real embedded PostgreSQL + pgvector (tests/retrieve/conftest.py).

The overlap is forced, not hoped for: the first build pauses inside its ingest until the
second is either seen waiting on the lock (``pg_locks``) or has looked at the table
itself (which only a build without the lock can do while the first is mid-ingest, and
which then loads the rows a second time: the assertions below fail).
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import numpy as np
import pytest

from evalq.retrieve import pg_lock, pg_server
from evalq.retrieve.kinds import Documents, KindOptions
from evalq.retrieve.pgvector_kind import PgvectorIndex
from evalq.retrieve.registry import INDEX_KINDS


def _docs(n: int = 500, dim: int = 16) -> Documents:
    """A corpus of its own (its key is new to the session's server)."""
    rng = np.random.default_rng(uuid.uuid4().int % 2**32)
    return Documents(tuple(f"doc-{i:04d}" for i in range(n)),
                     rng.standard_normal((n, dim)).astype(np.float32))


def _options(pg: pg_server.Database) -> KindOptions:
    return INDEX_KINDS.parse({"kind": "pgvector", "dsn": pg.dsn, "index": "hnsw"},
                             "vectors", "faiss")


def _waiting(conn: Any, lock: int) -> bool:
    """Whether a session waits for the advisory lock ``lock`` (a bigint lock is shown
    as its high and low 32 bits in ``classid`` / ``objid``)."""
    high, low = (lock >> 32) & 0xFFFFFFFF, lock & 0xFFFFFFFF
    found = conn.execute(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
        "AND classid::bigint = %s AND objid::bigint = %s AND objsubid = 1",
        (high, low)).fetchone()
    return int(found[0]) > 0


def test_lock_ids_are_64_bit_and_differ_by_key() -> None:
    a, b = pg_lock.lock_id("ab" * 32), pg_lock.lock_id("ac" * 32)
    assert a != b and -2**63 <= a < 2**63 and -2**63 <= b < 2**63
    assert pg_lock.lock_id("ab" * 32) == a


@pytest.mark.server
def test_two_builds_of_one_key_load_it_once(pg: pg_server.Database,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    docs, options = _docs(), _options(pg)
    watcher = pg_server.connect(pg, "test")
    second_looked = threading.Event()
    in_ingest = threading.Event()
    first_copy = PgvectorIndex._copy
    stored = PgvectorIndex._rows_stored
    lock: list[int] = []

    def copy(self: PgvectorIndex, sql_ids: np.ndarray, vectors: np.ndarray) -> None:
        if threading.current_thread().name == "first" and not in_ingest.is_set():
            assert self.cache is not None
            lock.append(pg_lock.lock_id(self.cache.key))
            in_ingest.set()
            while not (second_looked.is_set() or _waiting(watcher, lock[0])):
                time.sleep(0.01)
        first_copy(self, sql_ids, vectors)

    def rows_stored(self: PgvectorIndex, key: str) -> Any:
        found = stored(self, key)
        if threading.current_thread().name == "second":
            second_looked.set()
        return found

    monkeypatch.setattr(PgvectorIndex, "_copy", copy)
    monkeypatch.setattr(PgvectorIndex, "_rows_stored", rows_stored)
    indexes: dict[str, Any] = {}
    errors: list[BaseException] = []

    def build(name: str) -> None:
        try:
            indexes[name] = INDEX_KINDS.build(options, docs, where=f"candidates.{name}")
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)
            in_ingest.set()

    first = threading.Thread(target=build, args=("first",), name="first")
    second = threading.Thread(target=build, args=("second",), name="second")
    try:
        first.start()
        in_ingest.wait()
        second.start()
        first.join()
        second.join()
        assert not errors, errors
        caches = {name: index.cache.record() for name, index in indexes.items()}
        assert caches["first"]["rows_loaded"] == len(docs.ids)
        assert caches["second"]["reused"] and caches["second"]["rows_loaded"] == 0
        table = indexes["first"].table
        assert indexes["second"].table == table
        total, distinct = watcher.execute(
            f"SELECT count(*), count(DISTINCT id) FROM {table}").fetchone()
        assert (total, distinct) == (len(docs.ids), len(docs.ids))
        names = [r[0] for r in watcher.execute(
            "SELECT indexname FROM pg_indexes WHERE tablename = %s AND indexname <> "
            "%s", (table, f"{table}_pkey"))]
        assert names == [f"{table}_idx"]
    finally:
        for index in indexes.values():
            index.close()
        watcher.close()
