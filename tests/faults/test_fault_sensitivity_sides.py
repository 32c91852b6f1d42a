"""Fault class "batch sensitivity asked of a variant that encodes nothing" (issue 32): a
candidate that borrows both sides (``documents:`` and ``queries:``) builds no engine, so
``batch_sensitivity.variants`` naming it was skipped at run time without a word: the
user asked for a measurement and got none. It is refused at plan time, naming the entry.
A candidate that borrows one side stays measurable."""

from __future__ import annotations

from pathlib import Path

import pytest
from faultkit import no_traceback, recipe_data, run_cli

from support import recipes

CANDIDATES = [
    {"name": "qdims", "documents": "reference", "vectors": {"dims": 256, "quantize": "int8"}},
    {"name": "both", "documents": "reference", "queries": "reference",
     "vectors": {"quantize": "binary"}}]


def _recipe(tmp_path: Path, variants: list[str]) -> Path:
    data = recipe_data(tmp_path, candidates=CANDIDATES, gates=[])
    data["batch_sensitivity"] = {"batch_tokens": [512], "shuffles": 1, "max_queries": 10,
                                 "max_docs": 60, "variants": variants}
    return recipes.write(tmp_path / "recipe.yaml", data)


def test_naming_a_variant_that_borrows_both_sides_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _recipe(tmp_path, ["qdims", "both"])
    result = run_cli(capsys, "validate", str(path))
    assert result.code == 2, result.err
    assert no_traceback(result.err) and str(path) in result.err
    assert "batch_sensitivity.variants.1" in result.err and "borrows both" in result.err
    assert "remove 'both'" in result.err


def test_a_variant_that_borrows_one_side_may_be_named(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(capsys, "validate", str(_recipe(tmp_path, ["qdims"])))
    assert result.code == 0, result.err
