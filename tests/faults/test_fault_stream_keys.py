"""An unknown key inside a dataset's ``stream:`` block lists that block's fields, not the
dataset spec's (issue 32: st_run_unknown_key)."""

from __future__ import annotations

from pathlib import Path

import pytest
from faultkit import no_traceback, recipe_data, run_cli

from support import recipes


@pytest.mark.parametrize("command", ["validate", "run"])
def test_unknown_stream_key_lists_the_stream_fields(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str) -> None:
    data = recipe_data(tmp_path, candidates=[{"name": "fp32-again"}])
    data["datasets"][0]["stream"] = {"blocks": 3}
    recipe = recipes.write(tmp_path / "recipe.yaml", data)
    result = run_cli(capsys, command, str(recipe), folder=tmp_path / "out")
    assert result.code == 2 and no_traceback(result.err)
    assert "stream.blocks" in result.err
    assert "allowed fields: block_rows, shard_rows" in result.err
    assert "use_titles" not in result.err  # the dataset spec's fields are not the fix
    assert "did you mean 'block_rows'" in result.err


def test_unknown_dataset_key_still_lists_the_spec_fields(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = recipe_data(tmp_path)
    data["datasets"][0]["use_title"] = True
    recipe = recipes.write(tmp_path / "recipe.yaml", data)
    result = run_cli(capsys, "validate", str(recipe))
    assert result.code == 2 and "use_titles" in result.err
    assert "did you mean 'use_titles'" in result.err
