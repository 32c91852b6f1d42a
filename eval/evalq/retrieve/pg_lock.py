"""One build of a keyed pgvector table at a time (issue 30, "cached and resumable").

Two runs (or a run and ``evalq load``) pointed at one PostgreSQL (the same dsn, or the
same embedded data folder) may need the same key's table at once. Both would find it
missing or incomplete and both would ingest it: duplicate-key errors at best, two index
builds at worst. So the ingest and index build of a keyed table hold a PostgreSQL
advisory lock named by the key, on the loading connection: the second run waits for
it, then checks the table again and finds it complete, so it loads nothing. A session
lock outlives the ingest's many transactions (one per COPY batch) and is released by
the server when the connection ends, so a run killed mid-build leaves no lock behind.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from evalq.retrieve import pg_server

_NAMESPACE = b"evalq keyed table\0"  # keeps evalq's lock ids apart from other users'


def lock_id(key: str) -> int:
    """The advisory lock's id: a signed 64-bit hash of the table's key."""
    digest = hashlib.blake2b(_NAMESPACE + key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


@contextmanager
def building(conn: Any, key: str, db: pg_server.Database, where: str) -> Iterator[None]:
    """Hold the key's advisory lock on ``conn`` (waiting while another session builds
    the table), released on leaving; a server that stops answering is exit 2."""
    import psycopg

    try:
        conn.execute("SELECT pg_advisory_lock(%s)", (lock_id(key),))
    except psycopg.OperationalError as exc:
        raise pg_server.database_error(exc, db, where) from None
    try:
        yield
    finally:  # a connection that is gone took its locks with it
        with contextlib.suppress(psycopg.Error):
            conn.execute("SELECT pg_advisory_unlock(%s)", (lock_id(key),))
