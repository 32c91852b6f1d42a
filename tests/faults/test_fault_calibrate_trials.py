"""``evalq calibrate --trials`` beyond a stated bound is refused before the simulation
allocates its draws (issue 32: cal_trials_huge ended in 'out of memory' advice about
max_docs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from faultkit import no_traceback, run_cli

import evalq.execute.calibrate


def _never(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the simulation ran")


@pytest.mark.parametrize("trials", ["1000000000", "100001"])
def test_huge_trials_refused_before_simulating(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, trials: str) -> None:
    monkeypatch.setattr(evalq.execute.calibrate, "calibrate", _never)
    result = run_cli(capsys, "calibrate", "--trials", trials)
    assert result.code == 2 and no_traceback(result.err)
    assert "--trials" in result.err and "100000" in result.err  # the field and the bound
    assert "memory" in result.err and "max_docs" not in result.err
