"""Fault class "a dsn whose user lacks a privilege evalq's table needs" (issue 32): the
database has pgvector, but its user may not create a table in the schema (PostgreSQL 15
and later grant no one CREATE on ``public``), or may not read the table another role
loaded under the same key. The first was reported as the server refusing the index
options, with a fix about pgvector's dimension limits; the second escaped as evalq's own
bug (exit 3). Each is refused naming the database, the dsn's field and the grant to ask
for; no rerun helps, and the server is not called dead."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import numpy as np
import pytest

from evalq.core.errors import InputError
from evalq.retrieve import pg_server
from evalq.retrieve.kinds import Documents
from evalq.retrieve.pgvector_kind import PgvectorIndex
from evalq.retrieve.pgvector_options import PgvectorOptions

pytestmark = pytest.mark.server

WHERE = "candidates.pg.index"


@pytest.fixture(scope="session")
def pg() -> Iterator[pg_server.Database]:
    """The session's embedded PostgreSQL, as tests/retrieve/conftest.py's (one server per
    process: its worker group is the databases')."""
    yield pg_server.embedded(None, allow_root=True, where="test")


@pytest.fixture
def dsns(pg: pg_server.Database) -> tuple[str, str]:
    """A database of its own with pgvector, and two dsns to it: the superuser's, and a
    login role's that has only what PUBLIC has (CONNECT, no CREATE on ``public``)."""
    name = f"priv_{uuid.uuid4().hex[:8]}"
    conn = pg_server.connect(pg, "test")
    try:
        conn.execute(f"CREATE DATABASE {name}")
        conn.execute(f"CREATE ROLE {name} LOGIN")
        owner = conn.execute("SELECT current_user").fetchone()[0]
    finally:
        conn.close()
    host = pg.dsn.split("host=", 1)[1].split("&", 1)[0]
    superuser = f"postgresql://{owner}@/{name}?host={host}"
    pg_server.connect(pg_server.remote(superuser), "test").close()  # creates pgvector
    return superuser, f"postgresql://{name}@/{name}?host={host}"


def _docs() -> Documents:
    vectors = np.random.default_rng(0).standard_normal((20, 8)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return Documents(tuple(f"d{i}" for i in range(20)), vectors)


def _refusal(dsn: str) -> InputError:
    index = PgvectorIndex(PgvectorOptions(dsn=dsn, index="none"), WHERE)
    try:
        with pytest.raises(InputError) as caught:
            index.add(_docs())
    finally:
        index.close()
    return caught.value


def _assert_names_the_grant(error: InputError) -> None:
    assert error.field == f"{WHERE}.dsn"
    assert "may not" in error.message and "stopped answering" not in error.message
    assert error.fix is not None and "GRANT" in error.fix
    assert "dimensions" not in error.fix


def test_a_user_who_may_not_create_the_table_is_told_which_grant(
        dsns: tuple[str, str]) -> None:
    _assert_names_the_grant(_refusal(dsns[1]))


def test_a_user_who_may_not_read_another_roles_table_is_told_which_grant(
        dsns: tuple[str, str]) -> None:
    superuser, plain = dsns
    loaded = PgvectorIndex(PgvectorOptions(dsn=superuser, index="none"), WHERE)
    try:
        loaded.add(_docs())  # the key's table, the superuser's
    finally:
        loaded.close()
    _assert_names_the_grant(_refusal(plain))
