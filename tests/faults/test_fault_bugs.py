"""evalq's own bugs exit 3 with the traceback logged; only a damaged results file exits 2.

A bug is planted (monkeypatched) inside the code that reads a results folder: a KeyError in
a report section, a TypeError in the gate statistics, in the paired differences of
``evalq compare`` and in ``evalq calibrate``. Each used to be caught by a catch-all around
the whole command and reported as "the folder is damaged, rerun evalq run" (exit 2),
blaming the user for evalq's bug. Through the CLI entry that maps exceptions to exit
codes, each must now be exit 3, with the one-line internal-error message on stderr and
the traceback in the crash log it names. The damaged files beside them stay exit 2,
naming the file and the field.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from faultkit import no_traceback, run_cli, write_recipe

import evalq.app.compare_command
import evalq.execute.calibrate
import evalq.execute.losses
import evalq.report.retrieval_sections
from evalq.app.cli import main

pytestmark = [pytest.mark.model]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bugs-finished")
    assert main(["run", str(write_recipe(folder))]) in (0, 1)
    return folder / "out"


@pytest.fixture
def work(finished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the finished folder; the crash log lands under ``tmp_path``."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    shutil.copytree(finished, out)
    return out


def _planted(kind: type[Exception]) -> Any:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise kind("planted by test_fault_bugs")
    return broken


def _assert_bug(code: int, err: str, kind: type[Exception]) -> None:
    """Exit 3, the internal-error line naming the exception, and a crash log holding its
    traceback; never the damaged-folder message meant for bad input."""
    assert code == 3, err
    assert "internal error (a bug in evalq, not in your input)" in err
    assert f"{kind.__name__}: " in err and "planted by test_fault_bugs" in err
    assert "damaged" not in err and "rerun 'evalq run'" not in err
    assert no_traceback(err)  # the traceback goes to the log, not the console
    log = re.search(r"the traceback is in (\S+?)\. Please", err)
    assert log is not None, err
    text = Path(log.group(1)).read_text(encoding="utf-8")
    assert "Traceback (most recent call last)" in text
    last = text.rstrip().splitlines()[-1]  # the exception the traceback ends in
    assert last.startswith(f"{kind.__name__}: ") and "planted by test_fault_bugs" in last


def test_a_key_error_in_a_report_section_is_exit_3(work: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evalq.report.retrieval_sections, "costs", _planted(KeyError))
    result = run_cli(capsys, "report", str(work), "-o", str(tmp_path / "r.html"))
    _assert_bug(result.code, result.err, KeyError)
    assert not (tmp_path / "r.html").exists()


def test_a_type_error_in_the_gate_statistics_is_exit_3(work: Path,
                                                       capsys: pytest.CaptureFixture[str],
                                                       monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    # every per-dataset gate is decided through losses.decide_losses -> decide_gates
    monkeypatch.setattr(evalq.execute.losses, "decide_gates", _planted(TypeError))
    result = run_cli(capsys, "gate", str(work))
    _assert_bug(result.code, result.err, TypeError)


def test_a_type_error_in_compare_is_exit_3(finished: Path, work: Path,
                                           capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evalq.app.compare_command, "metric_diffs", _planted(TypeError))
    result = run_cli(capsys, "compare", str(finished), str(work))
    _assert_bug(result.code, result.err, TypeError)


def test_a_key_error_in_calibrate_is_exit_3(work: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(evalq.execute.calibrate, "paired_values", _planted(KeyError))
    result = run_cli(capsys, "calibrate", str(work), "--trials", "50")
    _assert_bug(result.code, result.err, KeyError)


# -- beside them, damaged files stay bad input ----------------------------------------------

def _edit_manifest(folder: Path, edit: Any) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    edit(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _drop_reference(manifest: dict[str, Any]) -> None:
    del manifest["variants"]["fp32"]


def _unfigured_parity(manifest: dict[str, Any]) -> None:
    manifest["variants"]["int8-vectors"]["parity"] = {"checked": True, "passed": True}


@pytest.mark.parametrize(("edit", "field"), [
    (_drop_reference, "variants"),
    (_unfigured_parity, "variants.int8-vectors.parity"),
])
def test_gate_on_a_damaged_manifest_is_exit_2_naming_the_field(
        work: Path, capsys: pytest.CaptureFixture[str], edit: Any, field: str) -> None:
    _edit_manifest(work, edit)
    result = run_cli(capsys, "gate", str(work))
    assert result.code == 2, result.err
    assert str(work / "manifest.json") in result.err and f"field '{field}'" in result.err
    assert no_traceback(result.err) and "Fix:" in result.err


def test_gate_on_a_per_query_file_without_a_measure_is_exit_2(
        work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = work / "per_query" / "tiny" / "int8-vectors.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({k: v for k, v in row.items() if k != "nDCG@10"})
                            + "\n" for row in rows))
    result = run_cli(capsys, "gate", str(work))
    assert result.code == 2, result.err
    assert str(path) in result.err and "nDCG@10" in result.err and no_traceback(result.err)


def test_gate_on_per_query_rows_of_other_queries_is_exit_2(
        work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = work / "per_query" / "tiny" / "int8-vectors.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0]["query_id"] = "no-such-query"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    result = run_cli(capsys, "gate", str(work))
    assert result.code == 2, result.err
    assert str(path) in result.err and no_traceback(result.err)
