"""The results folder: strict JSON, exact round trips, atomic replacement."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from evalq.errors import InputError
from evalq.metrics.values import PerQuery
from evalq.results import SCHEMA_VERSION, RunFolder, clean_json


def test_clean_json_turns_non_finite_into_null() -> None:
    data = clean_json({"a": math.nan, "b": [np.float32(1.5), np.inf], "c": np.int64(3)})
    assert data == {"a": None, "b": [1.5, None], "c": 3}
    json.dumps(data, allow_nan=False)


def test_per_query_values_round_trip_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    values = PerQuery(("q1", "q 2", "q\u00e93"), {"nDCG@10": rng.random(3),
                                               "overlap@10": np.array([1.0, math.nan, 0.3])})
    folder = RunFolder(tmp_path)
    folder.prepare()
    folder.write_per_query("ds", "v", values)
    back = folder.read_per_query("ds", "v")
    assert back.query_ids == values.query_ids
    assert np.array_equal(back.values["nDCG@10"], values.values["nDCG@10"])  # bit-exact
    assert np.isnan(back.values["overlap@10"][1])


def test_summary_is_replaced_atomically_and_stale_summary_moves_aside(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    folder.prepare()
    folder.write_summary({"passed": True})
    assert json.loads((tmp_path / "summary.json").read_text())["schema_version"] == SCHEMA_VERSION
    folder.prepare()  # a new run starts in the same folder
    assert not (tmp_path / "summary.json").exists()
    assert (tmp_path / "summary.previous.json").exists()
    assert not list(tmp_path.glob(".*.tmp"))


def test_reading_a_folder_that_is_not_finished_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        RunFolder(tmp_path).read_summary()
    assert "summary.json" in str(info.value)


def test_other_schema_versions_are_refused(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"schema_version": 99}))
    with pytest.raises(InputError) as info:
        RunFolder(tmp_path).read_summary()
    assert "schema_version 99" in str(info.value)
