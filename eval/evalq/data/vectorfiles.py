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
        ids = ids_path.read_text(encoding="utf-8").splitlines()
    row_of = {doc: i for i, doc in enumerate(ids)}
    missing = [doc for doc in wanted if doc not in row_of]
    if missing:
        raise InputError(message=f"vector file {path} lacks {len(missing)} {what} of the "
                         f"{'corpus' if what == 'documents' else 'dataset'}, e.g. "
                         f"{', '.join(missing[:3])}",
                         fix=f"embed all the dataset's {what}, or lower "
                         f"max_{'docs' if what == 'documents' else 'queries'}")
    rows = np.fromiter((row_of[doc] for doc in wanted), dtype=np.int64, count=len(wanted))
    return np.asarray(vectors[rows], dtype=np.float32)


def _parquet(path: Path, id_column: str, vector_column: str) -> tuple[list[str], np.ndarray]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise InputError(message=f"vector file {path} is parquet, and pyarrow is not "
                         "installed", fix="pip install pyarrow, or save the vectors as .npy "
                         "with an ids file") from None
    table = pq.read_table(path, columns=[id_column, vector_column])
    ids = [str(i) for i in table.column(id_column).to_pylist()]
    vectors = np.asarray(table.column(vector_column).to_pylist(), dtype=np.float32)
    return ids, vectors
