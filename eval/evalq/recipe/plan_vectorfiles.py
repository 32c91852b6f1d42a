"""What the plan reads of stored vectors before the run loads them (issue 31): each
source's ids and width, and a seeded sample of a file's row norms.

A vector file may stand for either side of a variant (``documents:`` or ``queries:``), so
every message names the side's field (``documents.path``, ``queries.ids``). The ``.npy``
header is read memory-mapped and a parquet file's columns once; a pgvector table or a
Qdrant shard (documents only) through :mod:`evalq.retrieve.stored_vectors`. Everything
wrong is the user's to fix: an :class:`InputError` with the fix.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.errors import InputError
from evalq.data.vectorfiles import parquet_matrix, read_ids, read_parquet
from evalq.plan.sides import ProbeOptions, VectorFile
from evalq.retrieve.stored_vectors import pgvector_header, qdrant_header, qdrant_server_header


def resolve_file(name: str, base: Path) -> Path:
    """A recipe's file path, relative to the recipe's folder."""
    candidate = Path(name).expanduser()
    return candidate if candidate.is_absolute() else base / candidate


def qdrant_folder(path: str, collection: str | None, base: Path) -> Path:
    """A Qdrant source's shard folder: ``path`` (from the recipe's folder) / ``collection``."""
    folder = resolve_file(path, base)
    return folder / collection if collection else folder


def read_header(file: VectorFile, base: Path, side: str = "documents") -> tuple[set[str], int]:
    """The source's ids and vector width, reading the ``.npy`` header only (memory-mapped)
    or the parquet columns; an :class:`InputError` with the fix for what is wrong."""
    if file.pgvector is not None:
        db = file.pgvector
        ids_list, width = pgvector_header(db.dsn, db.table, db.id_column, db.vector_column,
                                          side)
        return _unique(ids_list, file.label(), side), width
    q = file.qdrant
    if q is not None and q.url is not None:
        assert q.collection is not None
        ids_list, width = qdrant_server_header(q.url, q.collection, q.api_key_env,
                                               q.id_payload, side)
        return _unique(ids_list, file.label(), side), width
    if file.qdrant is not None:
        assert file.qdrant.path is not None
        ids_list, width = qdrant_header(
            qdrant_folder(file.qdrant.path, file.qdrant.collection, base),
            file.qdrant.id_payload, side)
        return _unique(ids_list, file.label(), side), width
    where = _existing(file, base, side)
    if where.suffix == ".parquet":
        ids_list, width = _parquet_header(where, file, side)
    else:
        ids_list, width = _npy_header(where, file, base, side)
    return _unique(ids_list, str(where), side), width


def sample_norms(file: VectorFile, base: Path, probe: ProbeOptions) -> np.ndarray | None:
    """The norms of a seeded sample of a vector file's rows (``probe.texts`` of them), or
    None for a database source (its rows are read, and probed, by the run)."""
    if file.path is None:
        return None
    where = resolve_file(file.path, base)
    if where.suffix == ".parquet":
        vectors: Any = _parquet_vectors(where, file.vector_column)
    else:
        vectors = np.load(where, mmap_mode="r", allow_pickle=False)
    rows = len(vectors)
    pick = np.sort(np.random.default_rng(probe.seed).choice(
        rows, size=min(probe.texts, rows), replace=False))
    return np.linalg.norm(np.asarray(vectors[pick], dtype=np.float64), axis=1)


def _existing(file: VectorFile, base: Path, side: str) -> Path:
    assert file.path is not None
    where = resolve_file(file.path, base)
    if not where.is_file():
        raise InputError(message=f"vector file {where} does not exist",
                         fix=f"fix {side}.path (relative paths are read from the recipe's "
                         "folder)")
    if where.suffix not in (".npy", ".parquet"):
        raise InputError(message=f"vector file {where} is neither .npy nor .parquet",
                         fix="save the vectors with numpy.save (with an ids file) or as "
                         "parquet with an id and a vector column")
    return where


def _unique(ids_list: list[str], source: str, side: str) -> set[str]:
    ids = set(ids_list)
    if len(ids) != len(ids_list):
        dupes = sorted({i for i in ids_list if ids_list.count(i) > 1})[:5] \
            if len(ids_list) < 100_000 else ["(several)"]
        raise InputError(message=f"the ids of {source} repeat: {', '.join(dupes)}",
                         fix=f"give each of the {side} one row (one id per line, unique)")
    return ids


def _npy_header(where: Path, file: VectorFile, base: Path, side: str
                ) -> tuple[list[str], int]:
    one = side.removesuffix("s").replace("querie", "query")
    if file.ids is None:
        raise InputError(message=f"vector file {where} has no ids file",
                         fix=f"add {side}.ids: <file with one {one} id per line, in row "
                         "order>")
    try:
        array = np.load(where, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(message=f"vector file {where} is not a readable .npy array ({exc})",
                         fix="save it with numpy.save(path, vectors.astype('float32'))") \
            from None
    if array.ndim != 2 or array.dtype.kind != "f":
        raise InputError(message=f"vector file {where} holds a {array.ndim}-D "
                         f"{array.dtype} array; a ({side}, dim) float matrix is needed",
                         fix="save the vectors as a 2-D float32 array")
    ids_path = resolve_file(file.ids, base)
    if not ids_path.is_file():
        raise InputError(message=f"ids file {ids_path} does not exist",
                         fix=f"fix {side}.ids (one {one} id per line, in row order)")
    ids = read_ids(ids_path)
    if len(ids) != array.shape[0]:
        raise InputError(message=f"vector file {where} has {array.shape[0]} rows but "
                         f"{ids_path} has {len(ids)} ids",
                         fix="write one id per row, in the file's row order")
    return ids, int(array.shape[1])


def _parquet_header(where: Path, file: VectorFile, side: str) -> tuple[list[str], int]:
    table = read_parquet(where)
    for column in (file.id_column, file.vector_column):
        if column not in table.column_names:
            raise InputError(message=f"vector file {where} has no column '{column}' "
                             f"(it has {', '.join(table.column_names)})",
                             fix=f"set {side}.id_column / vector_column")
    ids = [str(i) for i in table.column(file.id_column).to_pylist()]
    first = table.column(file.vector_column).slice(0, 1).to_pylist()
    if not first or not isinstance(first[0], list) or not all(
            isinstance(x, float) for x in first[0]):
        raise InputError(message=f"column '{file.vector_column}' of {where} does not hold "
                         "lists of floats", fix="store one float list per row")
    return ids, len(first[0])


def _parquet_vectors(where: Path, column: str) -> np.ndarray:
    return parquet_matrix(read_parquet(where, [column]), column, where, dtype=np.float64)
