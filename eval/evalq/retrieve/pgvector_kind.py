"""The ``pgvector`` retrieval kind: the variant's vectors in a PostgreSQL table, searched
with pgvector's HNSW or IVFFlat index (or none), as a team deploys them.

A FAISS pass says nothing about the database the users search: pgvector adds its own
approximate index and its own vector types (``halfvec`` halves the bytes; ``bit`` is
``binary_quantize`` with a float re-rank of the top ``rerank``). This kind builds that
table and index, with pgvector's own option names, and is judged against exact search of
the same vectors like every kind (:func:`evalq.retrieve.kinds.index_report`).

- Bulk load: binary ``COPY`` of the vectors through pgvector's psycopg adapter, in
  batches (each its own transaction).
- Cached and resumable: the table is named by the vectors' key and the build options
  (:mod:`evalq.retrieve.keyed`) and kept after the run; a complete one (its comment
  says so) is searched again with no ingest and no index build, an interrupted one gets
  only its missing rows (``id`` is the primary key), then the index. Runs that share
  a server build one key's table one at a time (:mod:`evalq.retrieve.pg_lock`).
- Ties: ``ORDER BY distance, id``, where a row's id is its place in trec_eval's tie order
  (document id descending), so the rows chosen at the depth boundary are trec_eval's.
- Proof: ``EXPLAIN`` of the first query. An ``Index Scan`` on the index is an index run
  (the plan's node and index name are recorded); a plan without it (a ``Seq Scan``) is
  recorded as an exhaustive run, never called an index run. ``enable_seqscan: false``
  (the default with an index) keeps the planner from choosing a Seq Scan on a small
  table, as pgvector's docs advise for testing an index.
- Costs: table and index bytes (``pg_relation_size``, ``pg_total_relation_size``), COPY
  and index build seconds.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from evalq.core.errors import InputError
from evalq.core.ranking import Ranking
from evalq.retrieve import keyed, kinds, pg_lock, pg_server, serverwatch, workers
from evalq.retrieve.kinds import Documents, IndexProof, IndexStats, KindSpec, Queries
from evalq.retrieve.pgvector_options import PgvectorOptions, PgvectorSearch, PgvectorSweep
from evalq.retrieve.search import id_ranks

# operator -> (operator class suffix, score from distance): pgvector's <#> is the negative
# inner product, <=> the cosine distance, <-> the L2 distance; scores are "higher first".
_OPERATORS = {"<#>": ("ip_ops", lambda d: -d), "<=>": ("cosine_ops", lambda d: 1.0 - d),
              "<->": ("l2_ops", lambda d: -d)}
_COPY_BATCH = 10_000  # rows per COPY: an interrupted ingest keeps every batch it finished
_COMPLETE = "evalq complete"  # the table comment a finished ingest sets, with its key


class PgvectorIndex:
    """One table (and its index) of one variant's vectors. ``where`` names the recipe
    field in errors."""

    in_process = False  # a server process (its own, or yours by dsn:)

    def __init__(self, options: PgvectorOptions, where: str) -> None:
        self.options, self.where = options, where
        self.db = (pg_server.remote(options.dsn) if options.dsn is not None else
                   pg_server.embedded(options.data_dir, options.allow_root, where))
        self.conn = pg_server.connect(self.db, where)
        try:
            version = self.conn.execute("SELECT extversion FROM pg_extension "
                                        "WHERE extname = 'vector'").fetchone()[0]
            pg_server.check_version(version, options, self.db.label, where)
        except BaseException:
            self.conn.close()
            raise
        self.table = self.index_name = ""  # named by the vectors' key when loaded
        self.cache: keyed.CacheUse | None = None
        self._ids: tuple[str, ...] = ()
        self._row_of: np.ndarray = np.zeros(0, dtype=np.int64)  # sql id -> row
        self._dim = 0
        self._copy_s = self._index_s = self._search_s = 0.0
        self._queries = self._missing = 0
        self._plan: dict[str, Any] = {}
        self._query_s = np.zeros(0, dtype=np.float64)
        self._settings: dict[str, str] = {}

    # -- building ---------------------------------------------------------------------
    def add(self, docs: Documents) -> None:
        """Load the corpus into the table its key names (:mod:`evalq.retrieve.keyed`):
        reuse a complete one, finish an interrupted one, or make it; then build the
        index and mark the table complete. The corpus is added once, whole: the key is
        that of every document."""
        if docs.vectors is None:
            raise ValueError("a pgvector table is built from vectors; these documents have "
                             "none")
        if self._ids:
            raise ValueError("a pgvector table is keyed by its whole corpus; add it once")
        vectors = np.ascontiguousarray(docs.vectors, dtype=np.float32)
        self._dim = int(vectors.shape[1])
        key = keyed.vectors_key("pgvector", docs.ids, vectors, keyed.build_options(
            self.options, PgvectorSweep.BUILD_TIME))
        self.table = f"evalq_{key[:24]}"
        self.index_name = f"{self.table}_idx"
        # sql id = place in trec_eval's tie order (document id descending)
        ranks = id_ranks(tuple(docs.ids))
        sql_ids = len(ranks) - 1 - ranks
        self._row_of = np.empty(len(sql_ids), dtype=np.int64)
        self._row_of[sql_ids] = np.arange(len(sql_ids))
        self._ids = tuple(docs.ids)
        with pg_lock.building(self.conn, key, self.db, self.where):  # one build at a time
            self._load(key, sql_ids, vectors)

    def _load(self, key: str, sql_ids: np.ndarray, vectors: np.ndarray) -> None:
        """Reuse the key's complete table, or load what it lacks and build its index
        (under the key's lock: another run's finished build is found complete here)."""
        have = self._rows_stored(key)
        if have is None:
            self.cache = keyed.CacheUse(key, reused=True, resumed=len(sql_ids), rows=len(sql_ids))
            return
        self.cache = keyed.CacheUse(key, reused=False, resumed=len(have), rows=len(sql_ids))
        if not have:
            self._sql(f"CREATE TABLE IF NOT EXISTS {self.table} (id int4 PRIMARY KEY, "
                      f"embedding {self._column()})")
        missing = ~np.isin(sql_ids, np.fromiter(have, dtype=np.int64, count=len(have)))
        began, todo = time.perf_counter(), np.flatnonzero(missing)
        for start in range(0, len(todo), _COPY_BATCH):
            rows = todo[start:start + _COPY_BATCH]
            self._copy(sql_ids[rows], vectors[rows])  # each batch its own transaction
        self._copy_s = time.perf_counter() - began if len(todo) else 0.0
        if self.options.index != "none":
            began = time.perf_counter()
            self._sql(self._create_index(), field="index")
            self._index_s = time.perf_counter() - began
        self._sql(f"ANALYZE {self.table}")
        self._sql(f"COMMENT ON TABLE {self.table} IS '{_COMPLETE} {key}'")

    def _rows_stored(self, key: str) -> set[int] | None:
        """The sql ids already in the key's table (empty: no table), or None when the
        table is complete (every row loaded, the index built, the marker set)."""
        import psycopg

        try:
            found = self.conn.execute(
                "SELECT obj_description(to_regclass(%s), 'pg_class'), "
                "to_regclass(%s) IS NOT NULL", (self.table, self.table)).fetchone()
            if not found[1]:
                return set()
            have = {int(r[0]) for r in self.conn.execute(f"SELECT id FROM {self.table}")}
        except (psycopg.OperationalError, psycopg.errors.InsufficientPrivilege) as exc:
            raise self._failure(exc, "dsn") from None
        complete = found[0] == f"{_COMPLETE} {key}" and len(have) == len(self._ids)
        return None if complete else have

    def _column(self) -> str:
        kind = "halfvec" if self.options.vector_type == "halfvec" else "vector"
        return f"{kind}({self._dim})"

    def _indexed_expression(self) -> str:
        if self.options.vector_type == "bit":
            return f"(binary_quantize(embedding)::bit({self._dim}))"
        return "embedding"

    def _create_index(self) -> str:
        o = self.options
        if o.vector_type == "bit":
            ops = "bit_hamming_ops"
        else:
            ops = f"{o.vector_type}_{_OPERATORS[o.operator][0]}"
        with_ = {"m": o.m, "ef_construction": o.ef_construction} if o.index == "hnsw" \
            else {"lists": o.lists}
        params = ", ".join(f"{k} = {v}" for k, v in with_.items() if v is not None)
        return (f"CREATE INDEX IF NOT EXISTS {self.index_name} ON {self.table} USING {o.index} "
                f"({self._indexed_expression()} {ops})" + (f" WITH ({params})" if params
                                                          else ""))

    def _copy(self, sql_ids: np.ndarray, vectors: np.ndarray) -> None:
        import psycopg
        from pgvector import HalfVector

        half = self.options.vector_type == "halfvec"
        try:
            with self.conn.cursor() as cur, cur.copy(
                    f"COPY {self.table} (id, embedding) FROM STDIN WITH (FORMAT BINARY)"
                    ) as copy:
                copy.set_types(["int4", "halfvec" if half else "vector"])
                for sql_id, vector in zip(sql_ids.tolist(), vectors):
                    copy.write_row((sql_id, HalfVector(vector) if half else vector))
        except psycopg.Error as exc:
            raise self._failure(exc, "vector_type") from None

    # -- searching --------------------------------------------------------------------
    def search(self, queries: Queries, depth: int, params: Any = None) -> Ranking:
        import psycopg

        if queries.vectors is None:
            raise ValueError("a pgvector table is searched with query vectors; these have "
                             "none")
        wanted = params if params is not None else self.options.search_options()
        self._apply(wanted)
        sql = self.query_sql(wanted, depth)
        vectors = np.ascontiguousarray(queries.vectors, dtype=np.float32)
        n_q = len(vectors)
        idx = np.full((n_q, depth), -1, dtype=np.int64)
        scores = np.full((n_q, depth), np.nan, dtype=np.float64)
        score_of = (lambda d: -d) if self._hamming_only(wanted) \
            else _OPERATORS[self.options.operator][1]
        try:
            if n_q:
                self._plan = pg_server.plan_summary(self.conn.execute(
                    "EXPLAIN (FORMAT JSON) " + sql, {"q": vectors[0]}).fetchone()[0])
            self._query_s = np.zeros(n_q, dtype=np.float64)
            began = time.perf_counter()
            with self.conn.cursor() as cur:
                for row, vector in enumerate(vectors):
                    asked = time.perf_counter()
                    found = cur.execute(sql, {"q": vector}, prepare=True).fetchall()
                    self._query_s[row] = time.perf_counter() - asked
                    if found:
                        got = np.asarray(found, dtype=np.float64)
                        idx[row, :len(found)] = self._row_of[got[:, 0].astype(np.int64)]
                        scores[row, :len(found)] = score_of(got[:, 1])
            self._search_s = time.perf_counter() - began
        except psycopg.Error as exc:
            raise self._failure(exc, "ef_search") from None
        self._queries, self._missing = n_q, int((idx < 0).sum())
        return Ranking.from_search(queries.ids, self._ids, idx, scores)

    def search_timed(self, queries: Queries, depth: int, params: Any
                     ) -> tuple[Ranking, np.ndarray]:
        """:meth:`search` at ``params``, with each query's seconds (its round trip to the
        server, the settings SET once before)."""
        ranking = self.search(queries, depth, params)
        return ranking, self._query_s.copy()

    def _hamming_only(self, wanted: PgvectorSearch) -> bool:
        return self.options.vector_type == "bit" and wanted.rerank is None

    def query_sql(self, wanted: PgvectorSearch, depth: int) -> str:
        """The query, with the query vector as ``%(q)s``; it answers ``(id, distance)``
        rows, whose ids :meth:`doc_ids` names."""
        op, dim, t = self.options.operator, self._dim, self.table
        cast = f"::halfvec({dim})" if self.options.vector_type == "halfvec" else "::vector"
        if self.options.vector_type != "bit":
            return (f"SELECT id, embedding {op} (%(q)s{cast}) AS distance FROM {t} "
                    f"ORDER BY distance, id LIMIT {int(depth)}")
        hamming = (f"binary_quantize(embedding)::bit({dim}) <~> "
                   f"binary_quantize(%(q)s::vector)")
        if wanted.rerank is None:
            return (f"SELECT id, {hamming} AS distance FROM {t} "
                    f"ORDER BY distance, id LIMIT {int(depth)}")
        return (f"SELECT id, distance FROM (SELECT id, embedding {op} (%(q)s::vector) AS "
                f"distance, {hamming} AS hamming FROM {t} ORDER BY hamming, id "
                f"LIMIT {int(wanted.rerank)}) candidates ORDER BY distance, id "
                f"LIMIT {int(depth)}")

    def settings_sql(self, wanted: PgvectorSearch) -> list[str]:
        """The SET statements of ``wanted`` for a session that searches this index (the
        literal and int types keep the values safe to inline)."""
        sets: dict[str, Any] = {"hnsw.ef_search": wanted.ef_search,
                                "ivfflat.probes": wanted.probes}
        if self.options.index != "none":
            sets[f"{self.options.index}.iterative_scan"] = wanted.iterative_scan
            sets["enable_seqscan"] = "on" if self.options.enable_seqscan else "off"
        return [f"SET {name} = {value}" for name, value in sets.items() if value is not None]

    def _apply(self, wanted: PgvectorSearch) -> None:
        """SET the session's search settings, then read them back (what the proof
        records is what PostgreSQL holds, not what the recipe asked)."""
        import psycopg

        names = ["hnsw.ef_search", "ivfflat.probes"]
        if self.options.index != "none":
            names.append(f"{self.options.index}.iterative_scan")
        try:
            for statement in self.settings_sql(wanted):
                self.conn.execute(statement)
            # current_setting(.., true): a reused table's session may not have loaded
            # pgvector yet (no COPY, no CREATE), so its settings may not exist yet
            self._settings = {name: self.conn.execute(
                "SELECT current_setting(%s, true)", (name,)).fetchone()[0]
                              for name in (*names, "enable_seqscan")}
        except psycopg.OperationalError as exc:
            raise pg_server.database_error(exc, self.db, self.where) from None

    def doc_ids(self, sql_ids: Any) -> tuple[str, ...]:
        """The documents of a query's answered row ids, in the order given."""
        return tuple(self._ids[self._row_of[int(i)]] for i in sql_ids)

    def server_watch(self) -> serverwatch.ServerWatch:
        """The embedded postmaster, or a dsn server's when it runs on this host."""
        import psycopg

        try:
            return serverwatch.postgres(self.conn, pg_server.postmaster_pid(self.db),
                                        self.db.label)
        except psycopg.OperationalError as exc:
            raise pg_server.database_error(exc, self.db, self.where) from None

    def connections_left(self) -> int:
        """How many more sessions the server accepts now (``max_connections``)."""
        return workers.free_connections(self.conn)

    def alive(self) -> bool:
        """Whether the server still takes a new session and answers it."""
        return pg_server.answers(self.db)

    def worker(self, timeout_s: float) -> workers.PgvectorWorker:
        """A search session of its own (one connection), for concurrent searches at the
        options' settings (:mod:`evalq.retrieve.workers`)."""
        return workers.PgvectorWorker(self, timeout_s)

    # -- reporting --------------------------------------------------------------------
    def stats(self) -> IndexStats:
        import psycopg

        try:
            total, heap, index, version, server, database = self.conn.execute(
                "SELECT pg_total_relation_size(%s), pg_relation_size(%s), "
                "COALESCE((SELECT pg_relation_size(oid) FROM pg_class WHERE relname = %s), 0),"
                " (SELECT extversion FROM pg_extension WHERE extname = 'vector'), "
                "current_setting('server_version'), pg_database_size(current_database())",
                (self.table, self.table, self.index_name)).fetchone()
        except psycopg.OperationalError as exc:
            raise pg_server.database_error(exc, self.db, self.where) from None
        searched = self._search_s > 0 and self._queries
        return IndexStats(
            bytes=int(total), build_s=self._copy_s + self._index_s, documents=len(self._ids),
            detail={"table_bytes": int(heap), "index_bytes": int(index),
                    "total_bytes": int(total), "database_bytes": int(database),
                    "copy_s": self._copy_s,
                    "index_build_s": self._index_s, "search_s": self._search_s,
                    "queries_per_s": self._queries / self._search_s if searched else None,
                    "missing_slots": self._missing, "pgvector": version,
                    "postgresql": server, "database": self.db.label, "table": self.table,
                    **(self.cache.record() if self.cache is not None else {})})

    def proof(self) -> IndexProof:
        """From the query plan: an Index Scan on this index, or an exhaustive scan."""
        used = self._plan.get("index_name") == self.index_name
        return IndexProof(
            kind="pgvector", exact=not used,
            method=self._plan.get("node", "not searched") if used else
            self._plan.get("scan", "not searched"),
            params={**self._plan, "index_requested": self.options.index,
                    "fell_back": self.options.index != "none" and not used,
                    "vector_type": self.options.vector_type,
                    "operator": self.options.operator, **self._settings})

    def close(self) -> None:
        """Close the connection; the table stays, for the next run of its key."""
        if self.conn is not None and not self.conn.closed:
            self.conn.close()

    def _sql(self, statement: str, field: str = "dsn") -> None:
        import psycopg

        try:
            self.conn.execute(statement)
        except psycopg.Error as exc:
            raise self._failure(exc, field) from None

    def _failure(self, exc: BaseException, field: str) -> InputError:
        """A database error as the user's to fix: a server gone, a privilege the dsn's
        user lacks (no rerun helps), or options the server refused (``field``)."""
        import psycopg

        if isinstance(exc, psycopg.OperationalError):
            return pg_server.database_error(exc, self.db, self.where)
        if isinstance(exc, psycopg.errors.InsufficientPrivilege):
            return pg_server.not_permitted(exc, self.db, self.where)
        return self._refused(exc, field)

    def _refused(self, exc: BaseException, field: str) -> InputError:
        return InputError(
            message=f"{self.db.label} refused the {self.options.index} index over "
                    f"{self._dim}-wide {self.options.vector_type} "
                    f"({pg_server.first_line(exc)})",
            field=f"{self.where}.{field}",
            fix="pgvector indexes vector up to 2000 dimensions, halfvec up to 4000, bit up "
                "to 64000; halfvec needs pgvector 0.7 or newer; use options it accepts")


def _build(options: PgvectorOptions, docs: Documents, where: str) -> PgvectorIndex:
    return kinds.filled(PgvectorIndex(options, where), docs)


KIND = KindSpec(name="pgvector", summary="a PostgreSQL table with pgvector's HNSW / IVFFlat "
                "index (vector, halfvec, or bit with a re-rank); an embedded server, or "
                "dsn: for your own", inputs="vectors", options=PgvectorOptions, build=_build,
                search_options=PgvectorSearch, database=True)
