"""``evalq run --only fp32`` gates no candidate: it must not say 'gates PASSED' (issue 32,
UNCLEAR case cli_only_ref), in the run's console lines, ``evalq gate`` or the report."""

from __future__ import annotations

from pathlib import Path

import pytest
from faultkit import run_cli, write_recipe

pytestmark = [pytest.mark.model, pytest.mark.slow]


def test_only_the_reference_is_not_a_pass(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    recipe = write_recipe(tmp_path)
    ran = run_cli(capsys, "run", str(recipe), "--only", "fp32")
    assert ran.code == 0, ran.err
    assert "gates PASSED" not in ran.out and "no candidate gated" in ran.out
    gated = run_cli(capsys, "gate", str(tmp_path / "out"))
    assert gated.code == 0, gated.err
    assert "gates PASSED" not in gated.out and "no candidate gated" in gated.out
    assert run_cli(capsys, "report", str(tmp_path / "out")).code == 0
    page = next((tmp_path / "out").glob("*.html")).read_text()
    assert "every gate PASSED" not in page and "no candidate gated" in page
