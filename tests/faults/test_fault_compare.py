"""``evalq compare`` and ``evalq gate`` on a results folder with damaged per-query files
(issue 32, item 4): compare must never call identical what it could not read, and a
per-query value that is not a number (``true``, ``"0.5"``) is a damaged file, not 1.0.

Each case: exit 2, naming the file (and the measure for a wrong type), with a fix."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from faultkit import run_cli, write_recipe

from evalq.app.cli import main

pytestmark = [pytest.mark.model, pytest.mark.slow]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("compare-finished")
    assert main(["run", str(write_recipe(folder))]) in (0, 1)
    return folder / "out"


@pytest.fixture
def copy(finished: Path, tmp_path: Path) -> Path:
    out = tmp_path / "b"
    shutil.copytree(finished, out)
    return out


@pytest.mark.parametrize("variant", ["int8-vectors", "fp32"])
@pytest.mark.parametrize("side", ["A", "B"])
def test_compare_refuses_a_missing_per_query_file(finished: Path, copy: Path, capsys,
                                                  variant: str, side: str) -> None:
    gone = copy / "per_query" / "tiny" / f"{variant}.jsonl"
    gone.unlink()
    first, second = (copy, finished) if side == "A" else (finished, copy)
    result = run_cli(capsys, "compare", str(first), str(second))
    assert result.code == 2, result.out + result.err
    assert "identical" not in result.out
    assert str(gone) in result.err and "Fix:" in result.err


def test_gate_and_compare_agree_on_a_missing_file(copy: Path, finished: Path,
                                                  capsys) -> None:
    (copy / "per_query" / "tiny" / "int8-vectors.jsonl").unlink()
    assert run_cli(capsys, "gate", str(copy)).code == 2
    assert run_cli(capsys, "compare", str(finished), str(copy)).code == 2


@pytest.mark.parametrize("value", [True, False, "0.5", [0.5], {"v": 1}])
@pytest.mark.parametrize("command", ["gate", "compare"])
def test_a_per_query_value_that_is_not_a_number_is_refused(finished: Path, copy: Path,
                                                           capsys, value: object,
                                                           command: str) -> None:
    path = copy / "per_query" / "tiny" / "int8-vectors.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[1]["nDCG@10"] = value
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = [str(copy)] if command == "gate" else [str(finished), str(copy)]
    result = run_cli(capsys, command, *argv)
    assert result.code == 2, result.out + result.err
    assert f"{path}:2" in result.err
    assert "field 'nDCG@10'" in result.err and "not a number" in result.err
    assert "Fix:" in result.err and "Traceback" not in result.err


def _repeat_row(rows: list[dict[str, object]]) -> str:
    rows.append(dict(rows[0]))
    return "field 'query_id'"


def _ndcg_two(rows: list[dict[str, object]]) -> str:
    rows[1]["nDCG@10"] = 2.0
    return "field 'nDCG@10'"


@pytest.mark.parametrize("damage", [_repeat_row, _ndcg_two])
@pytest.mark.parametrize("command", ["gate", "compare"])
def test_a_repeated_row_or_an_impossible_value_is_refused(
        finished: Path, copy: Path, capsys, damage: object, command: str) -> None:
    """A query's row twice was counted twice by `evalq gate`, and an nDCG@10 of 2.0 was
    averaged as it was (issue 32)."""
    path = copy / "per_query" / "tiny" / "int8-vectors.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    field = damage(rows)  # type: ignore[operator]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    argv = [str(copy)] if command == "gate" else [str(finished), str(copy)]
    result = run_cli(capsys, command, *argv)
    assert result.code == 2, result.out + result.err
    assert str(path) in result.err and field in result.err, result.err
    assert "Fix:" in result.err and "Traceback" not in result.err


def test_null_stays_an_undefined_value_and_an_intact_copy_is_identical(
        finished: Path, copy: Path, capsys) -> None:
    result = run_cli(capsys, "compare", str(finished), str(copy))
    assert result.code == 0 and "no differences" in result.out


@pytest.mark.parametrize("damage", ["row", "measures"])
def test_compare_refuses_a_candidate_file_missing_rows_or_measures(
        finished: Path, copy: Path, capsys, damage: str) -> None:
    """A candidate's file with a query's row deleted, or with only the query ids left,
    was paired on what remained and compare printed 'identical' with exit 0 (issue 32)."""
    path = copy / "per_query" / "tiny" / "int8-vectors.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows = rows[1:] if damage == "row" else [{"query_id": r["query_id"]} for r in rows]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    for first, second in ((finished, copy), (copy, finished)):
        result = run_cli(capsys, "compare", str(first), str(second))
        assert result.code == 2, result.out + result.err
        assert "identical" not in result.out
        assert str(path) in result.err and "Fix:" in result.err
