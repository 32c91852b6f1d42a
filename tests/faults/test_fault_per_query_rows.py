"""Fault class "a per-query file with a repeated row or an impossible value" (issue 32):
every command that reads a results folder back (`evalq gate`, `evalq compare`, the
report, `evalq calibrate`) reads per-query files through one reader, which accepted a
query's row twice (counted twice in every mean and interval) and an nDCG@10 of 2.0 or a
recall of -0.5 (JSON numbers, so the type check passed them). Each is a damaged file:
exit 2 naming the file, the line, the query and the fix."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from evalq.core.errors import InputError
from evalq.results.folder import RunFolder

ROWS = [{"query_id": "q1", "nDCG@10": 0.5, "R@100": 1.0, "overlap@10": 0.9, "cosine": 0.99},
        {"query_id": "q2", "nDCG@10": 0.0, "R@100": 0.0, "overlap@10": 0.1, "cosine": -0.2},
        {"query_id": "q3", "nDCG@10": None, "R@100": 0.5, "overlap@10": 1.0, "cosine": 1.0}]


def _folder(tmp_path: Path, rows: list[dict[str, Any]]) -> tuple[RunFolder, Path]:
    path = tmp_path / "per_query" / "tiny" / "int8.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return RunFolder(tmp_path), path


def test_an_intact_file_reads_with_rounding_at_the_edges(tmp_path: Path) -> None:
    rows = [dict(r) for r in ROWS]
    rows[2]["cosine"] = 1.0000000000000002  # a vector's cosine with itself, as float sums it
    folder, _ = _folder(tmp_path, rows)
    values = folder.read_per_query("tiny", "int8")
    assert values.query_ids == ("q1", "q2", "q3")
    assert math.isnan(values.values["nDCG@10"][2])


def test_a_repeated_query_row_is_a_damaged_file(tmp_path: Path) -> None:
    folder, path = _folder(tmp_path, [*ROWS, {**ROWS[1], "nDCG@10": 1.0}])
    with pytest.raises(InputError) as caught:
        folder.read_per_query("tiny", "int8")
    error = caught.value
    assert error.file == path and error.line == 4 and error.field == "query_id"
    assert "query 'q2'" in error.message and "lines 2 and 4" in error.message
    assert error.fix and "rerun 'evalq run'" in error.fix


@pytest.mark.parametrize(("measure", "value"), [
    ("nDCG@10", 2.0), ("nDCG@10", -0.1), ("R@100", 1.5), ("overlap@10", -1),
    ("cosine", 1.5), ("cosine", -2.0)])
def test_a_value_outside_its_measures_range_is_a_damaged_file(
        tmp_path: Path, measure: str, value: float) -> None:
    rows = [dict(r) for r in ROWS]
    rows[1][measure] = value
    folder, path = _folder(tmp_path, rows)
    with pytest.raises(InputError) as caught:
        folder.read_per_query("tiny", "int8")
    error = caught.value
    assert error.file == path and error.line == 2 and error.field == measure
    assert "query 'q2'" in error.message and "outside [" in error.message


@pytest.mark.parametrize(("measure", "text"), [
    ("nDCG@10", "1" + "0" * 400), ("abs_delta", "Infinity"), ("abs_delta", "1e999"),
    ("my_custom", "-Infinity"), ("my_custom", "1" + "0" * 400), ("cosine", "-1e999")])
def test_an_infinite_or_overflowing_value_is_a_damaged_file(
        tmp_path: Path, measure: str, text: str) -> None:
    """evalq writes every value finite or null; an infinity (``Infinity``, ``1e999``, a
    400-digit integer) passed a range with no upper end, or a measure outside the range
    table, and moved every mean to inf; the integer ended in OverflowError (exit 3)."""
    rows = [dict(r) for r in ROWS]
    rows[1][measure] = "@@"
    folder, path = _folder(tmp_path, rows)
    path.write_text(path.read_text().replace('"@@"', text))
    with pytest.raises(InputError) as caught:
        folder.read_per_query("tiny", "int8")
    error = caught.value
    assert error.file == path and error.line == 2 and error.field == measure
    assert "finite" in error.message and error.fix


@pytest.mark.parametrize("text", ["", "\n"])
def test_an_empty_file_is_a_damaged_file(tmp_path: Path, text: str) -> None:
    folder, path = _folder(tmp_path, ROWS)
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        folder.read_per_query("tiny", "int8")
    assert caught.value.file == path and caught.value.fix


def test_a_value_at_a_boundary_reads(tmp_path: Path) -> None:
    rows = [dict(r) for r in ROWS]
    rows[0].update({"nDCG@10": 1.0, "R@100": -0.0, "cosine": -1.0, "overlap@10": 1 + 1e-7})
    folder, _ = _folder(tmp_path, rows)
    values = folder.read_per_query("tiny", "int8")
    assert values.values["nDCG@10"][0] == 1.0 and values.values["cosine"][0] == -1.0
