"""Concurrent searches of a database kind's index, one worker per client (issue 30,
"query p50/p99 through the database, also under ``evalq load``'s concurrency").

``evalq load`` drives a database stage (:mod:`evalq.execute.load.dbsearch`) with the
query vectors already encoded, so what it measures is the database alone. Each client
of the load generator's schedule gets a worker from the index's ``worker()``:

- pgvector: a :class:`PgvectorWorker`, a connection of its own with the index's search
  settings SET and ``statement_timeout`` at the load test's timeout; the query is the
  index's own (:meth:`evalq.retrieve.pgvector_kind.PgvectorIndex.query_sql`), prepared
  on first use, so a worker searches exactly as the run's sequential search did;
- Qdrant: the engine runs inside evalq's process (qdrant-edge), so its workers are
  threads sharing the one shard: what they measure includes Python's share of the
  process, and the result says ``in_process``. A Qdrant server (``url:``) is searched by
  threads sharing one qdrant-client, whose HTTP connections are pooled.

A worker answers a query vector with the documents' ids in rank order, so the load
test can check every answer against the sequential search of the same query.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from evalq.core.errors import InputError
from evalq.retrieve import pg_server
from evalq.retrieve.serverwatch import ServerWatch


class SearchWorker(Protocol):
    """One client's search session."""

    def search(self, vector: np.ndarray, depth: int) -> tuple[str, ...]:
        """The ids of the ``depth`` nearest documents, best first; raises
        :class:`WorkerTimeout` when the database gave up at the timeout."""
        ...

    def close(self) -> None: ...


class ConcurrentIndex(Protocol):
    """An index of a kind declared ``database=True`` (:class:`evalq.retrieve.kinds.KindSpec`)."""

    in_process: bool  # the database runs inside evalq's process (its workers are threads)

    def worker(self, timeout_s: float) -> SearchWorker: ...

    def server_watch(self) -> ServerWatch:
        """What of the database server can be sampled for CPU and memory (its process
        tree here, its own memory figures), or why nothing can
        (:mod:`evalq.retrieve.serverwatch`)."""
        ...

    def connections_left(self) -> int | None:
        """How many more workers the database accepts now (None: no limit)."""
        ...

    def alive(self) -> bool:
        """Whether the database still answers a new session (asked after a load step
        whose searches failed: a dead server ends the stage as ``server_died`` instead of
        failing every remaining level as a slow one)."""
        ...


class WorkerTimeout(Exception):
    """The database cancelled a search at the load test's timeout."""


class WorkerFailed(Exception):
    """The database refused or failed one search (counted by the load test as an error,
    with the first one's text); any other exception is evalq's bug and is raised."""


class PgvectorWorker:
    """A connection of its own to the index's database, at the index's settings."""

    def __init__(self, index: Any, timeout_s: float) -> None:
        self.index = index
        self.conn = pg_server.connect(index.db, index.where)
        self._sql: dict[int, str] = {}
        self._wanted = index.options.search_options()
        try:
            for statement in index.settings_sql(self._wanted):
                self.conn.execute(statement)
            self.conn.execute(f"SET statement_timeout = {max(1, int(timeout_s * 1000))}")
        except BaseException:
            self.conn.close()
            raise

    def search(self, vector: np.ndarray, depth: int) -> tuple[str, ...]:
        import psycopg

        sql = self._sql.get(depth)
        if sql is None:
            sql = self._sql[depth] = self.index.query_sql(self._wanted, depth)
        try:
            rows = self.conn.execute(sql, {"q": vector}, prepare=True).fetchall()
        except psycopg.errors.QueryCanceled as exc:
            raise WorkerTimeout(str(exc)) from None
        except psycopg.Error as exc:
            raise WorkerFailed(f"{type(exc).__name__}: {exc}") from None
        ids: tuple[str, ...] = self.index.doc_ids(r[0] for r in rows)
        return ids

    def close(self) -> None:
        if not self.conn.closed:
            self.conn.close()


class SharedWorker:
    """A thread's worker on an index every thread shares: Qdrant's in-process shard, or
    the one qdrant-client of a Qdrant server (its HTTP connections are pooled)."""

    def __init__(self, nearest: Callable[[np.ndarray, int], tuple[str, ...]]) -> None:
        self.nearest = nearest

    def search(self, vector: np.ndarray, depth: int) -> tuple[str, ...]:
        """``nearest``, with Qdrant's failures as :class:`WorkerFailed`: a server's are
        already exit-2 errors (qdrant_connection), the in-process engine's are a bare
        ``Exception`` or a refusal (RuntimeError / ValueError), as its sequential search
        maps them."""
        try:
            return self.nearest(vector, depth)
        except InputError as exc:
            raise WorkerFailed(exc.message) from None
        except Exception as exc:
            if type(exc) is Exception or isinstance(exc, RuntimeError | ValueError):
                raise WorkerFailed(f"{type(exc).__name__}: {exc}") from None
            raise

    def close(self) -> None:
        return None


def free_connections(conn: Any) -> int:
    """How many more connections the server accepts now: ``max_connections`` less the
    superuser-reserved ones and those open (this one included)."""
    total, reserved, used = conn.execute(
        "SELECT current_setting('max_connections')::int, "
        "current_setting('superuser_reserved_connections')::int, "
        "(SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
    ).fetchone()
    return max(0, int(total) - int(reserved) - int(used))
