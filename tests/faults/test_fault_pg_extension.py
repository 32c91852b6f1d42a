"""Fault class "a database without pgvector that its user may not change" (issue 32): a
``dsn:`` to a database where pgvector is installed on the server but not created, whose
user is no superuser. ``CREATE EXTENSION`` was refused with 'permission denied', which
evalq reported as a server that 'stopped answering or refused the connection', with a
fix to check the server is up and rerun: no rerun helps. It is refused naming the
database, the dsn's field and what to ask of its administrator, for the index kind and
for a ``documents: {pgvector: ...}`` source alike."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from evalq.core.errors import InputError
from evalq.retrieve import pg_server, stored_vectors

pytestmark = pytest.mark.server


@pytest.fixture(scope="session")
def pg() -> Iterator[pg_server.Database]:
    """The session's embedded PostgreSQL, as tests/retrieve/conftest.py's (one server per
    process: its worker group is the databases')."""
    yield pg_server.embedded(None, allow_root=True, where="test")


@pytest.fixture
def plain_user_dsn(pg: pg_server.Database) -> str:
    """A database of its own, owned by a user who is no superuser, without pgvector."""
    name = f"plain_{uuid.uuid4().hex[:8]}"
    conn = pg_server.connect(pg, "test")
    try:
        conn.execute(f"CREATE ROLE {name} LOGIN")
        conn.execute(f"CREATE DATABASE {name} OWNER {name}")
    finally:
        conn.close()
    host = pg.dsn.split("host=", 1)[1].split("&", 1)[0]
    return f"postgresql://{name}@/{name}?host={host}"


def test_a_database_whose_user_may_not_create_pgvector_is_refused(
        plain_user_dsn: str) -> None:
    with pytest.raises(InputError) as caught:
        pg_server.connect(pg_server.remote(plain_user_dsn), "candidates.pg.index")
    assert caught.value.field == "candidates.pg.index.dsn"
    assert "pgvector extension" in caught.value.message
    assert "stopped answering" not in caught.value.message
    assert caught.value.fix and "CREATE EXTENSION vector" in caught.value.fix
    with pytest.raises(InputError) as caught:
        stored_vectors.pgvector_header(plain_user_dsn, "docs", "id", "embedding",
                                       "candidates.0.documents")
    assert caught.value.field == "candidates.0.documents.pgvector.dsn"
    assert caught.value.fix and "CREATE EXTENSION vector" in caught.value.fix
