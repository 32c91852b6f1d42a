"""Vectors a user already has on disk, read by the dataset's corpus (or query) ids.

"Can I keep my index?" (issue 31): a candidate may search its queries against the
vectors a deployment already stores instead of re-encoding the corpus. They come as
``.npy`` (a float matrix, memory-mapped) with a text file of ids, one a line in row
order, or as ``.parquet`` with an id column and a vector column (pyarrow). Rows are
picked in the corpus's (or the queries') order by id, so a ``max_docs`` /
``max_queries`` slice reads only its rows. A candidate may take its query vectors from
such a file too (queries encoded elsewhere, e.g. by the serving stack's logs).
The plan has checked the header, the ids and the coverage
(``evalq.recipe.plan_sides``); what is wrong here is still bad input (exit 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.errors import InputError


def read_rows(path: Path, ids_path: Path | None, wanted: Sequence[str], *,
              id_column: str = "id", vector_column: str = "vector",
              what: str = "documents") -> np.ndarray:
    """The rows of ``wanted`` ids, in that order, as a float32 (len(wanted), dim) matrix
    (``what``: the side, "documents" or "queries", for the messages)."""
    if path.suffix == ".parquet":
        ids, vectors = _parquet(path, id_column, vector_column)
    else:
        if ids_path is None:
            raise InputError(message=f"vector file {path} has no ids file",
                             fix=f"add {what}.ids: <file with one id per line>")
        vectors = np.load(path, mmap_mode="r", allow_pickle=False)
        ids = read_ids(ids_path)
    row_of = {doc: i for i, doc in enumerate(ids)}
    missing = [doc for doc in wanted if doc not in row_of]
    if missing:
        raise InputError(message=f"vector file {path} lacks {len(missing)} {what} of the "
                         f"{'corpus' if what == 'documents' else 'dataset'}, e.g. "
                         f"{', '.join(missing[:3])}",
                         fix=f"embed all the dataset's {what}, or lower "
                         f"max_{'docs' if what == 'documents' else 'queries'}")
    rows = np.fromiter((row_of[doc] for doc in wanted), dtype=np.int64, count=len(wanted))
    picked = np.asarray(vectors[rows], dtype=np.float32)
    check_finite(picked, wanted, f"vector file {path}", what)
    return picked


def read_ids(ids_path: Path) -> list[str]:
    """A vector file's ids, one a line in row order; a file that is not UTF-8 text (a
    binary file named by mistake) is bad input, not a crash. A byte-order mark (what
    some editors put first) and spaces around an id are not part of it: ids hold no
    whitespace, and "lacks d1" for a file whose first line reads d1 sends a user
    looking for what cannot be seen."""
    try:
        return [line.strip() for line in
                ids_path.read_text(encoding="utf-8-sig").splitlines()]
    except UnicodeDecodeError as exc:
        raise InputError(message=f"ids file {ids_path} is not UTF-8 text ({exc.reason} at "
                         f"byte {exc.start})",
                         fix="write the ids as UTF-8 text, one id per line, in the vector "
                         "file's row order") from None


def check_finite(vectors: np.ndarray, wanted: Sequence[str], source: str, what: str,
                 field: str | None = None) -> None:
    """A NaN or infinite row is refused: FAISS and the quantizers give it no score, so its
    document silently leaves every ranking (a query's, every result), and a float16 file
    overflows to inf above 65504 (why: the probe samples only a few rows, so it cannot be
    what finds them). ``source`` names the file, table or collection the rows came from."""
    bad = np.flatnonzero(~np.isfinite(vectors).all(axis=1))
    if bad.size:
        raise InputError(message=f"{source} has {bad.size} rows with NaN or "
                         f"infinite values, e.g. {what} "
                         f"{', '.join(str(wanted[i]) for i in bad[:3])}", field=field,
                         fix=f"re-embed those {what} (or drop them from the dataset); "
                         "every row must be finite")


def _parquet(path: Path, id_column: str, vector_column: str) -> tuple[list[str], np.ndarray]:
    table = read_parquet(path, [id_column, vector_column])
    ids = [str(i) for i in table.column(id_column).to_pylist()]
    return ids, parquet_matrix(table, vector_column, path)


def parquet_matrix(table: Any, vector_column: str, path: Path,
                   dtype: Any = np.float32) -> np.ndarray:
    """The vector column of a parquet ``table`` as a (rows, dim) matrix; a row that is
    null, empty or of another width is bad input naming the file and the column (the
    plan's norm sample reads the column too, and numpy's "inhomogeneous shape" was an
    exit 3 there)."""
    try:
        vectors = np.asarray(table.column(vector_column).to_pylist(), dtype=dtype)
    except (TypeError, ValueError):
        vectors = np.empty((0, 0), dtype=dtype)
    if vectors.ndim != 2 or vectors.shape[0] != table.num_rows:
        raise InputError(message=f"column '{vector_column}' of {path} does not hold one "
                         "float list of the same length per row (a row is empty, null or "
                         "of another width)",
                         fix="store one vector (a list of floats of the model's width) per "
                         "row")
    return vectors


def read_parquet(path: Path, columns: list[str] | None = None) -> Any:
    """The parquet table, or an :class:`InputError` naming the file when it is not one
    (empty, truncated, another format renamed)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(message=f"vector file {path} is parquet, and pyarrow is not "
                         "installed", fix="pip install pyarrow, or save the vectors as .npy "
                         "with an ids file") from None
    try:
        return pq.read_table(path, columns=columns)
    except (pa.ArrowException, OSError) as exc:
        raise InputError(message=f"vector file {path} is not a readable parquet file "
                         f"({str(exc).splitlines()[0]})",
                         fix="write it again with pyarrow (pyarrow.parquet.write_table), or "
                         "save the vectors as .npy with an ids file") from None
