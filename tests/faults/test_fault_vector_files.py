"""Fault class "a stored vector file is broken" (issue 32): `documents: {path, ids}` names a
file the user made, so whatever is wrong with it is bad input, found by `evalq plan` where
it can be (exit 2 naming the file and the fix, never exit 3), and a row that would silently
leave every ranking (NaN, inf) is refused when the run reads it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from faultkit import TINY, no_traceback, run_cli, write_recipe

from evalq.core.errors import InputError
from evalq.data.vectorfiles import read_rows

IDS = ["d1", "d2", "d3", "d4", "d5", "d6", "7", "d8"]  # beir-tiny's corpus ids


def _vectors(rows: int = len(IDS)) -> np.ndarray:
    v = np.random.default_rng(0).standard_normal((rows, 384)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def _npy(folder: Path) -> dict[str, str]:
    np.save(folder / "v.npy", _vectors())
    (folder / "ids.txt").write_text("\n".join(IDS) + "\n")
    return {"path": "v.npy", "ids": "ids.txt"}


def _empty_npy(folder: Path) -> dict[str, str]:
    _npy(folder)
    (folder / "v.npy").write_bytes(b"")
    return {"path": "v.npy", "ids": "ids.txt"}


def _binary_ids(folder: Path) -> dict[str, str]:
    _npy(folder)
    (folder / "ids.txt").write_bytes(b"\xff\xfe\x00" * 10)
    return {"path": "v.npy", "ids": "ids.txt"}


def _parquet_bytes(data: bytes) -> object:
    def make(folder: Path) -> dict[str, str]:
        (folder / "v.parquet").write_bytes(data)
        return {"path": "v.parquet"}
    return make


def _parquet_rows(last: list[float] | None) -> object:
    """A parquet file whose last row is ``last`` (a short list, or null) where the others
    are full vectors: the plan's norm sample read the column with numpy, and its
    "inhomogeneous shape" ValueError was an exit 3."""
    def make(folder: Path) -> dict[str, str]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        rows: list[list[float] | None] = [list(map(float, v)) for v in _vectors()]
        rows[-1] = last
        pq.write_table(pa.table({"id": IDS, "vector": rows}), folder / "v.parquet")
        return {"path": "v.parquet"}
    return make


def _qdrant(collection: str | None) -> object:
    def make(folder: Path) -> dict[str, object]:
        (folder / "shard").mkdir()
        return {"qdrant": {"path": "shard", "collection": collection}}
    return make


CASES = {
    "empty .npy": (_empty_npy, ["v.npy", "not a readable .npy"]),
    "ids file not UTF-8": (_binary_ids, ["ids.txt", "not UTF-8"]),
    "parquet of another format": (_parquet_bytes(b"PAR1 not parquet"),
                                  ["v.parquet", "not a readable parquet"]),
    "empty parquet": (_parquet_bytes(b""), ["v.parquet", "not a readable parquet"]),
    "a parquet row of another width": (_parquet_rows([0.5] * 10),
                                       ["v.parquet", "of another width"]),
    "a null parquet row": (_parquet_rows(None), ["v.parquet", "null"]),
    "an empty folder as a Qdrant shard": (_qdrant(None), ["no Qdrant shard", "shard"]),
    "a Qdrant collection out of its path": (_qdrant("../.."), ["collection"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_plan_names_the_broken_file(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                    case: str) -> None:
    make, expected = CASES[case]
    documents = make(tmp_path)  # type: ignore[operator]
    path = write_recipe(tmp_path, candidates=[{"name": "kept", "documents": documents}])
    outcome = run_cli(capsys, "plan", str(path))
    assert outcome.code == 2, outcome.err
    assert no_traceback(outcome.err)
    assert "candidates.0.documents" in outcome.err
    for text in expected:
        assert text in outcome.err, outcome.err
    # nothing was written outside the recipe's folder (Qdrant makes segments/ where it opens)
    assert not (tmp_path.parent / "segments").exists()


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_a_non_finite_row_is_refused_not_dropped(tmp_path: Path, bad: float) -> None:
    """A NaN row used to come back as it was: FAISS scored it NaN and its document left
    every ranking of the run without a word (the probe samples too few rows to see it)."""
    vectors = _vectors()
    vectors[3, 5] = bad
    np.save(tmp_path / "v.npy", vectors)
    (tmp_path / "ids.txt").write_text("\n".join(IDS) + "\n")
    with pytest.raises(InputError) as caught:
        read_rows(tmp_path / "v.npy", tmp_path / "ids.txt", IDS)
    assert "d4" in caught.value.message and "v.npy" in caught.value.message


def test_an_ids_file_from_a_windows_editor_reads_as_its_ids(tmp_path: Path) -> None:
    """A byte-order mark before the first id, CRLF line ends and a trailing space were
    read into the ids, and the run refused the file for 'lacking d1', which the user
    could see on its first line."""
    np.save(tmp_path / "v.npy", _vectors())
    (tmp_path / "ids.txt").write_bytes(
        "\ufeff".encode() + "\r\n".join([IDS[0] + " ", *IDS[1:]]).encode() + b"\r\n")
    assert np.array_equal(read_rows(tmp_path / "v.npy", tmp_path / "ids.txt", IDS),
                          _vectors())


def test_a_ragged_parquet_column_is_refused(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    vectors = [list(map(float, v)) for v in _vectors(3)]
    vectors[2] = vectors[2][:10]
    pq.write_table(pa.table({"id": IDS[:3], "vector": vectors}), tmp_path / "v.parquet")
    with pytest.raises(InputError) as caught:
        read_rows(tmp_path / "v.parquet", None, IDS[:3])
    assert "v.parquet" in caught.value.message


def test_the_tiny_set_is_what_the_ids_name() -> None:
    """The cases above name beir-tiny's ids; a changed fixture would make them vacuous."""
    import json

    lines = (TINY / "corpus.jsonl").read_text().splitlines()
    assert [str(json.loads(line)["_id"]) for line in lines] == IDS
