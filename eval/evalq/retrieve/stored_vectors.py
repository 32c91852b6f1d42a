"""Document vectors a deployment's database already holds, read by document id (issue 31,
"can I keep my index?": vectors on disk may be a pgvector table or a Qdrant collection).

The plan reads each source's ids and width (:func:`pgvector_header`,
:func:`qdrant_header` for a shard on disk, :func:`qdrant_server_header` for a collection
on a Qdrant server, through qdrant-client) to check them as it checks a vector file
(width against the model, ids unique, every corpus document present); the run reads
the corpus's rows (:func:`pgvector_rows`, :func:`qdrant_rows`,
:func:`qdrant_server_rows`), which the probe then compares with the reference engine's
vectors. Everything wrong with the source (no such table or column, no shard, no
collection, a dead server, a column that is not a vector, a collection of named or
sparse vectors only) is the user's to fix: an :class:`InputError` naming the source,
the field and the fix.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.errors import InputError, MissingExtraError
from evalq.data.vectorfiles import check_finite
from evalq.retrieve import pg_server
from evalq.retrieve.qdrant_connection import QdrantConnection

SCROLL_PAGE = 1024  # points per Qdrant scroll request


def pgvector_header(dsn: str, table: str, id_column: str, vector_column: str,
                    where: str) -> tuple[list[str], int]:
    """The table's document ids (as text) and its vectors' width."""
    with _pg(dsn, where) as (conn, sql):
        ids = [r[0] for r in _pg_rows(conn, sql.SQL("SELECT {}::text FROM {}").format(
            sql.Identifier(id_column), _table(sql, table)), table, where)]
        first = _pg_rows(conn, sql.SQL("SELECT vector_dims({}) FROM {} LIMIT 1").format(
            sql.Identifier(vector_column), _table(sql, table)), table, where)
    if not first:
        raise InputError(message=f"pgvector table {table} is empty",
                         field=f"{where}.pgvector.table",
                         fix="name the table that holds the corpus's vectors")
    return ids, int(first[0][0])


def pgvector_rows(dsn: str, table: str, id_column: str, vector_column: str,
                  wanted: Sequence[str], where: str) -> np.ndarray:
    """The rows of ``wanted`` ids, in that order, as float32 (halfvec read as vector)."""
    with _pg(dsn, where) as (conn, sql):
        found = _pg_rows(conn, sql.SQL(
            "SELECT {}::text, {}::vector FROM {} WHERE {}::text = ANY(%s)").format(
            sql.Identifier(id_column), sql.Identifier(vector_column), _table(sql, table),
            sql.Identifier(id_column)), table, where, (list(wanted),))
    return _in_order({doc: np.asarray(getattr(v, "to_numpy", lambda v=v: v)(),
                                      dtype=np.float32) for doc, v in found}, wanted,
                     f"pgvector table {table}", f"{where}.pgvector.vector_column")


@contextmanager
def _pg(dsn: str, where: str) -> Iterator[tuple[Any, Any]]:
    """A connection to ``dsn`` (pg_server's: pgvector's types registered), closed after."""
    from psycopg import sql

    conn = pg_server.connect(pg_server.remote(dsn), f"{where}.pgvector.dsn")
    try:
        yield conn, sql
    finally:
        conn.close()


def _table(sql: Any, table: str) -> Any:
    return sql.Identifier(*table.split("."))


def _pg_rows(conn: Any, query: Any, table: str, where: str,
             params: Any = None) -> list[Any]:
    import psycopg

    try:
        return list(conn.execute(query, params).fetchall())
    except psycopg.errors.UndefinedTable:
        raise InputError(message=f"there is no table {table} at that database",
                         field=f"{where}.pgvector.table",
                         fix="name an existing table (schema.name if not in the search "
                             "path)") from None
    except (psycopg.errors.UndefinedColumn, psycopg.errors.UndefinedFunction,
            psycopg.errors.CannotCoerce, psycopg.errors.DatatypeMismatch) as exc:
        raise InputError(message=f"pgvector table {table}: {pg_server.first_line(exc)}",
                         field=f"{where}.pgvector",
                         fix="set id_column to the document id column and vector_column "
                             "to a vector or halfvec column") from None
    except psycopg.OperationalError as exc:
        raise InputError(message=f"the database of pgvector table {table} stopped "
                                 f"answering ({pg_server.first_line(exc)})",
                         field=f"{where}.pgvector.dsn",
                         fix="check that the server is up, then rerun") from None


def qdrant_header(path: Path, id_payload: str | None, where: str) -> tuple[list[str], int]:
    """The shard's document ids and its vectors' width (read from the first point)."""
    ids: list[str] = []
    width = 0
    for doc, vector in _points(path, id_payload, where, with_vector=False,
                               width_of_first=True):
        ids.append(doc)
        width = width or len(vector)
    if not ids:
        raise InputError(message=f"Qdrant shard {path} holds no points",
                         field=f"{where}.qdrant.path",
                         fix="name the shard that holds the corpus's vectors")
    return ids, width


def qdrant_rows(path: Path, id_payload: str | None, wanted: Sequence[str],
                where: str) -> np.ndarray:
    """The points of ``wanted`` ids, in that order, as float32."""
    rows: dict[str, np.ndarray] = {}
    for doc, vector in _points(path, id_payload, where, with_vector=True):
        rows[doc] = np.asarray(vector, dtype=np.float32)
    return _in_order(rows, wanted, f"Qdrant shard {path}", f"{where}.qdrant")


def _points(path: Path, id_payload: str | None, where: str, *, with_vector: bool,
            width_of_first: bool = False) -> Any:
    """(document id, vector or []) of every point, scrolled in pages."""
    try:
        import qdrant_edge as qe
    except ImportError as exc:
        raise MissingExtraError("qdrant-edge-py", "vdb", "documents: {qdrant: ...}") from exc
    folder = path / "shard" if (path / "shard").is_dir() else path
    # An empty folder is no shard, and Qdrant would write a segments/ folder into it.
    if not folder.is_dir() or not any(folder.iterdir()):
        raise InputError(message=f"there is no Qdrant shard in {path}",
                         field=f"{where}.qdrant.path",
                         fix="name the shard's folder (path, and collection under it)")
    try:
        shard = qe.EdgeShard.load(str(folder))
    except Exception as exc:  # qdrant_edge raises a bare Exception for a folder it can't read
        if type(exc) is not Exception:  # any other type is evalq's bug: not bad input
            raise
        raise InputError(message=f"Qdrant could not open the shard in {folder} ({exc})",
                         field=f"{where}.qdrant.path",
                         fix="name a Qdrant shard folder that no other process holds open"
                         ) from None
    try:
        offset, first = None, True
        while True:
            records, offset = shard.scroll(qe.ScrollRequest(
                limit=SCROLL_PAGE, offset=offset, with_payload=id_payload is not None,
                with_vector=with_vector or (width_of_first and first)))
            for record in records:
                vector = record.vector
                if isinstance(vector, dict):  # named vectors: the unnamed one
                    vector = vector.get("", next(iter(vector.values()), []))
                yield _doc_id(record, id_payload, f"Qdrant shard {path}", where), vector or []
                first = False
            if offset is None or not records:
                return
    finally:
        shard.close()


def _doc_id(record: Any, id_payload: str | None, label: str, where: str) -> str:
    if id_payload is None:
        return str(record.id)
    payload = record.payload or {}
    if id_payload not in payload:
        raise InputError(message=f"point {record.id} of the {label} has no "
                                 f"payload key '{id_payload}'",
                         field=f"{where}.qdrant.id_payload",
                         fix="set id_payload to the payload key that holds the document "
                             "id, or null when the point id is the document id")
    return str(payload[id_payload])


def qdrant_server_header(url: str, collection: str, api_key_env: str | None,
                         id_payload: str | None, where: str) -> tuple[list[str], int]:
    """The collection's document ids and its vectors' width (read from its
    configuration, which must be one unnamed dense vector per point). Its distance is
    not needed: the candidate searches the vectors with its own index, and a Cosine
    collection's unit-length vectors meet the probe's norm check like any others."""
    with _server(url, collection, api_key_env, where) as (conn, width):
        ids = [doc for doc, _ in _scrolled(conn, collection, id_payload, where,
                                           with_vectors=False)]
    if not ids:
        raise InputError(message=f"the collection '{collection}' on {conn.label} holds "
                                 "no points", field=f"{where}.qdrant.collection",
                         fix="name the collection that holds the corpus's vectors")
    return ids, width


def qdrant_server_rows(url: str, collection: str, api_key_env: str | None,
                       id_payload: str | None, wanted: Sequence[str], where: str
                       ) -> np.ndarray:
    """The points of ``wanted`` ids, in that order, as float32 (the collection is
    scrolled in pages, and only the corpus's rows are kept)."""
    asked, rows = set(wanted), {}
    with _server(url, collection, api_key_env, where) as (conn, _):
        for doc, vector in _scrolled(conn, collection, id_payload, where,
                                     with_vectors=True):
            if doc in asked:
                rows[doc] = np.asarray(vector, dtype=np.float32)
    return _in_order(rows, wanted, f"the collection '{collection}' on {conn.label}",
                     f"{where}.qdrant")


@contextmanager
def _server(url: str, collection: str, api_key_env: str | None, where: str
            ) -> Iterator[tuple[QdrantConnection, int]]:
    """A connection to the server (qdrant_server's faults), after checking that the
    collection exists and holds one unnamed dense vector per point; closed after."""
    conn = QdrantConnection(url, api_key_env, None, f"{where}.qdrant",
                            needed_for="documents: {qdrant: {url: ...}}",
                            gone_fix="it was deleted while evalq read it: restore it, or "
                                     "name another collection")
    try:
        conn.collection = collection
        if not conn.call("collection", conn.client.collection_exists, collection):
            held = [c.name for c in conn.call("collection",
                                              conn.client.get_collections).collections]
            raise InputError(message=f"there is no collection '{collection}' on "
                                     f"{conn.label}", field=f"{where}.qdrant.collection",
                             fix="name one of the server's collections: "
                                 + (", ".join(sorted(held)[:10]) or "(it holds none)"))
        params = conn.call("collection", conn.client.get_collection,
                           collection).config.params
        vectors = params.vectors
        size = getattr(vectors, "size", None)
        if size is None:
            holds = (f"named vectors ({', '.join(sorted(vectors))})" if vectors
                     else "only sparse vectors" if params.sparse_vectors else "no vectors")
            raise InputError(message=f"the collection '{collection}' on {conn.label} holds "
                                     f"{holds}; evalq reads one unnamed dense vector per "
                                     "point", field=f"{where}.qdrant.collection",
                             fix="name a collection of one dense vector per point (copy "
                                 "the dense vectors into one, or give them as a file)")
        yield conn, int(size)
    finally:
        conn.close()


def _scrolled(conn: QdrantConnection, collection: str, id_payload: str | None,
              where: str, *, with_vectors: bool) -> Iterator[tuple[str, Any]]:
    """(document id, vector or None) of every point, scrolled in pages."""
    offset = None
    label = f"collection '{collection}' on {conn.label}"
    while True:
        records, offset = conn.call(
            "id_payload", conn.client.scroll, collection, limit=SCROLL_PAGE, offset=offset,
            with_payload=[id_payload] if id_payload is not None else False,
            with_vectors=with_vectors)
        for record in records:
            yield _doc_id(record, id_payload, label, where), record.vector
        if offset is None or not records:
            return


def _in_order(rows: dict[str, np.ndarray], wanted: Sequence[str], label: str,
              field: str) -> np.ndarray:
    """The ``wanted`` rows stacked in that order. Every one must be there and be one
    vector of the source's width: a NULL in a pgvector column arrives as a 0-d NaN, and
    a ``vector`` column declared without a width may hold rows of several; either made
    numpy's stack fail as an exit 3 (the plan reads one row's width only). A Qdrant
    collection stores NaN and infinite values as given, and the probe samples too few
    rows to find them: such a row is refused as a vector file's is."""
    missing = [doc for doc in wanted if doc not in rows]
    if missing:
        raise InputError(message=f"{label} lacks {len(missing)} documents of the corpus, "
                                 f"e.g. {', '.join(missing[:3])}", field=field,
                         fix="load the whole corpus into it, or lower max_docs")
    shapes = Counter(rows[doc].shape for doc in wanted)
    width = max(shapes, key=lambda s: (len(s) == 1, shapes[s]))
    odd = [doc for doc in wanted if rows[doc].shape != width or len(width) != 1]
    if odd:
        raise InputError(message=f"{label} has {len(odd)} rows of the corpus that are "
                                 f"NULL or not {width[0] if width else 'equally'} wide "
                                 f"like the others, e.g. documents {', '.join(odd[:3])}",
                         field=field, fix="store one vector of the model's width for every "
                                          "document (re-embed those rows)")
    matrix = np.stack([rows[doc] for doc in wanted]).astype(np.float32, copy=False)
    check_finite(matrix, wanted, label, "documents", field)  # as a vector file's rows
    return matrix
