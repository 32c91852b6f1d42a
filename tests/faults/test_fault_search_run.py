"""Fault class "a search rerun into its own folder" (issue 32), on a real search (MiniLM, the
pydocs slice, one weight variant × two precisions × two widths). A rerun of the same
recipe swept every combination's run and per-query files as "variants no longer in the
recipe" before deriving them again: a false message, and a window in which the folder
lacked the files its summary names. Only combinations that left the grid are stale."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from faultkit import run_cli

from support import recipes

pytestmark = [pytest.mark.slow, pytest.mark.model]


def _recipe(folder: Path, dims: list[int]) -> Path:
    data = recipes.recipe(
        "search-rerun", cache=folder / "cache", output=folder / "out", queries=24, docs=40,
        candidates=[], metrics=["nDCG@10"], reference_metrics=["overlap@10"],
        gates=[recipes.gate("nDCG@10", "qrels", max_drop="5%")], resamples=200,
        parity={"enabled": False},
        search={"weights": ["fp32"], "vectors": [{"quantize": "none"}, {"quantize": "int8"}],
                "dims": dims})
    return recipes.write(folder / "recipe.yaml", data)


def _combination_files(out: Path) -> set[str]:
    return {p.name for p in (out / "per_query" / "pydocs").glob("s.*.jsonl")}


def test_a_rerun_keeps_the_grid_and_sweeps_only_what_left_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _recipe(tmp_path, [384, 128])
    first = run_cli(capsys, "run", str(path))
    assert first.code in (0, 1), first.err
    grid = _combination_files(tmp_path / "out")
    assert len(grid) == 4, grid
    again: Any = run_cli(capsys, "run", str(path))
    assert again.code == first.code, again.err
    assert "no longer in the recipe" not in again.err, again.err
    assert _combination_files(tmp_path / "out") == grid
    narrower = run_cli(capsys, "run", str(_recipe(tmp_path, [384])))
    assert narrower.code in (0, 1), narrower.err
    assert "no longer in the recipe" in narrower.err
    assert _combination_files(tmp_path / "out") == {n for n in grid if ".384." in n}


def test_gate_on_an_edited_split_names_the_manifest(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`evalq gate` re-decides a search with the recipe its manifest stores; a split
    edited there to leave too few confirm queries was refused naming only the field."""
    import json

    assert run_cli(capsys, "run", str(_recipe(tmp_path, [384]))).code in (0, 1)
    manifest = tmp_path / "out" / "manifest.json"
    data = json.loads(manifest.read_text())
    data["recipe"]["search"]["split"]["explore"] = 0.9
    manifest.write_text(json.dumps(data))
    outcome = run_cli(capsys, "gate", str(tmp_path / "out"))
    assert outcome.code == 2, outcome.err
    assert str(manifest) in outcome.err and "search.split" in outcome.err, outcome.err
