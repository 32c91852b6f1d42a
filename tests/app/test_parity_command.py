"""`evalq parity`: a backend whose settings differ is named, with the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalq.app.cli import main
from support import recipes

pytestmark = [pytest.mark.model]

def _recipe(cache: Path) -> dict:
    return recipes.recipe("parity", cache=cache, candidates=[
        {"name": "same"}, {"name": "cls-pooled", "encoding": {"pooling": "cls"}}])


def test_parity_names_the_setting_that_differs(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    recipe = recipes.write(tmp_path / "parity.yaml", _recipe(tmp_path / "cache"))
    code = main(["parity", str(recipe), "--texts", "12"])
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert code == 1  # a float32 variant of the same weights disagrees: a real mismatch
    assert "ok" in lines["same"] and "min 1.0000000" in lines["same"]
    assert "MISMATCH" in lines["cls-pooled"]
    assert "pooling: 'cls' vs reference 'mean'" in lines["cls-pooled"]
