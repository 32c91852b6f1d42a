"""``evalq calibrate --search``: the grid search's simulated family-wise rate through the
command line, and its bad input (too few searches, a results folder it cannot use) refused
with exit 2 before anything is simulated (issue 31)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from faultkit import no_traceback, run_cli

import evalq.execute.calibrate
from evalq.decide.search_calibration import Setting


def _never(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the simulation ran")


def test_too_few_searches_refused(capsys: pytest.CaptureFixture[str],
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evalq.execute.calibrate, "simulate_search", _never)
    result = run_cli(capsys, "calibrate", "--search", "--searches", "10")
    assert result.code == 2 and no_traceback(result.err)
    assert "--searches" in result.err and "2000" in result.err


def test_results_folder_refused_with_search(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evalq.execute.calibrate, "simulate_search", _never)
    result = run_cli(capsys, "calibrate", str(tmp_path), "--search")
    assert result.code == 2 and no_traceback(result.err)
    assert "--search" in result.err


def test_search_calibration_prints_and_writes_json(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evalq.execute.calibrate, "SEARCH_SETTINGS", (Setting(6, queries=60),))
    out = tmp_path / "search.json"
    result = run_cli(capsys, "calibrate", "--search", "--searches", "50", "--json", str(out))
    assert result.code == 0, result.err
    assert "naive" in result.out and "Clopper-Pearson" in result.out
    rates = json.loads(out.read_text())["rates"]
    assert {r["procedure"] for r in rates} == {"search", "split without correction", "naive"}
    assert all(r["configurations"] == 6 and r["searches"] >= 50 for r in rates)


@pytest.mark.parametrize("argv", [["--searches", "1000000000000"], ["--trials", "10"]])
def test_searches_past_any_use_and_trials_are_refused(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        argv: list[str]) -> None:
    """`--searches 10**12` ended in 'out of memory. Fix: lower max_docs / resamples', knobs
    calibrate does not have; `--trials` with `--search` was silently ignored (issue 32)."""
    monkeypatch.setattr(evalq.execute.calibrate, "simulate_search", _never)
    result = run_cli(capsys, "calibrate", "--search", *argv)
    assert result.code == 2 and no_traceback(result.err), result.err
    assert argv[0] in result.err, result.err
