"""Vectors on disk read by corpus (or query) id (issue 31): .npy with an ids file, or
parquet."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evalq.core.errors import InputError
from evalq.data.vectorfiles import read_rows


def _matrix() -> tuple[np.ndarray, list[str]]:
    vectors = np.arange(12, dtype=np.float32).reshape(4, 3)
    return vectors, ["d0", "d1", "d2", "d3"]


def test_npy_rows_come_in_the_corpus_order(tmp_path: Path) -> None:
    vectors, ids = _matrix()
    np.save(tmp_path / "v.npy", vectors)
    (tmp_path / "ids.txt").write_text("\n".join(ids) + "\n")
    rows = read_rows(tmp_path / "v.npy", tmp_path / "ids.txt", ["d3", "d0"])
    assert rows.dtype == np.float32 and rows.tolist() == [vectors[3].tolist(),
                                                          vectors[0].tolist()]


def test_parquet_rows_come_in_the_corpus_order(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    vectors, ids = _matrix()
    pq.write_table(pa.table({"doc": ids, "emb": vectors.tolist()}), tmp_path / "v.parquet")
    rows = read_rows(tmp_path / "v.parquet", None, ["d2", "d1"], id_column="doc",
                     vector_column="emb")
    assert rows.tolist() == [vectors[2].tolist(), vectors[1].tolist()]


@pytest.mark.parametrize(("what", "words", "knob"), [
    ("documents", r"lacks 1 documents of the corpus, e\.g\. d9", "max_docs"),
    ("queries", r"lacks 1 queries of the dataset, e\.g\. d9", "max_queries")])
def test_a_missing_row_is_bad_input(tmp_path: Path, what: str, words: str,
                                    knob: str) -> None:
    vectors, ids = _matrix()
    np.save(tmp_path / "v.npy", vectors)
    (tmp_path / "ids.txt").write_text("\n".join(ids))
    with pytest.raises(InputError, match=words) as caught:
        read_rows(tmp_path / "v.npy", tmp_path / "ids.txt", ["d0", "d9"], what=what)
    assert knob in (caught.value.fix or "")
