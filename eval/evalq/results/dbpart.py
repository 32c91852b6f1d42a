"""The ``database`` part of a database stage in ``load/summary.json``
(``variants["<variant>@<kind>"].database``, written by :mod:`evalq.execute.load.dbstage`),
and the ``server`` part of its steps.

Kept apart from :mod:`evalq.results.schema` (which composes it into
:class:`~evalq.results.schema.LoadVariant`) because its shape belongs to the database
stage alone. ``sampling`` says what of the database server was watched while the steps
ran (:mod:`evalq.retrieve.serverwatch`): its process tree on this host, the memory it
reports itself, or nothing, with the reason (``"remote server db.example.com"``), so a
reader never takes a server that was not sampled for one that used nothing.
"""

from __future__ import annotations

from typing import Literal

from evalq.results.parts import Part


class ServerSampling(Part):
    """How the stage's database server was watched during its steps."""

    sampled: bool
    how: Literal["process", "metrics", "process+metrics"] | None = None
    reason: str | None = None  # why no process was sampled ("remote server <host>", ...)
    host: str | None = None  # the host (or unix socket folder) the database answered on
    pid: int | None = None  # the sampled process tree's root (a postmaster, a server)
    scope: str | None = None  # what that tree holds
    metrics: str | None = None  # the page the server's own memory figures came from


class StepServer(Part):
    """One step's ``server`` part in a database stage: the process tree's CPU seconds,
    cores and peak RSS (``how`` has ``process``), the peak of the memory the server
    reports itself (``metrics``: Qdrant's allocator, not its RSS; no CPU), or
    ``sampled: false`` with the reason."""

    sampled: bool
    reason: str | None = None
    cpu_s: float | None = None
    cpu_cores: float | None = None
    peak_rss_mb: float | None = None
    processes: int | None = None
    reported_resident_mb: float | None = None  # the peak of memory_resident_bytes
    reported_allocated_mb: float | None = None  # the peak of memory_allocated_bytes
    reports: int | None = None  # how many /metrics pages were read during the step


class DatabaseStage(Part):
    """What a database stage ran against: the database, its table or collection, the
    sequential search every concurrent answer is checked against, and the sampling."""

    kind: str
    end_to_end: bool
    dataset: str | None = None
    label: str | None = None  # the database, in words (without a dsn's password)
    table: str | None = None
    documents: int | None = None
    queries: int | None = None
    depth: int | None = None
    reused: bool | None = None
    rows_loaded: int | None = None
    index_method: str | None = None
    exact: bool | None = None
    sequential_queries_per_s: float | None = None
    embedding_cache: bool | None = None
    in_process: bool | None = None
    encode_s: float | None = None
    # what the database reports of itself (PostgreSQL: pg_relation_size,
    # pg_database_size; None where the database has no cheap server-side figure)
    table_bytes: int | None = None
    index_bytes: int | None = None
    database_bytes: int | None = None
    sampling: ServerSampling | None = None
    skipped_workloads: dict[str, str] | None = None
