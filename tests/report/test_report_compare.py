"""`evalq compare`: paired differences between two runs, refused across datasets."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from evalq.app.cli import main
from evalq.app.compare_command import compare_runs
from evalq.report.compare import render_markdown, render_text

pytestmark = [pytest.mark.slow, pytest.mark.model]


def test_compare_of_a_run_with_itself_shows_zero_differences(report_runs, capsys) -> None:
    run = report_runs.small
    c = compare_runs(run, run)
    assert c.no_differences
    assert c.metrics and all(m.change == "identical" and m.delta == 0.0 for m in c.metrics)
    assert all(m.ci_low == m.ci_high == 0.0 for m in c.metrics)
    assert not c.verdicts and not c.settings
    assert main(["compare", str(run), str(run)]) == 0
    out = capsys.readouterr().out
    assert "no differences" in out
    assert max(len(line) for line in out.splitlines()) <= 100
    assert main(["compare", str(run), str(run), "--markdown"]) == 0
    assert "✅ no differences" in capsys.readouterr().out


def test_rerun_from_the_cache_is_identical(report_runs) -> None:
    c = compare_runs(report_runs.small, report_runs.again)
    assert all(m.change == "identical" for m in c.metrics)
    assert not c.verdicts


def test_compare_finds_a_real_change_and_a_changed_verdict(report_runs,
                                                           tmp_path: Path) -> None:
    """B is A with int8-vectors' stored nDCG@10 lowered on half the queries (what a
    regression in B would leave) and its gate verdict flipped."""
    a = report_runs.small
    b = tmp_path / "b"
    shutil.copytree(a, b)
    path = b / "per_query" / "pydocs" / "int8-vectors.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    for i, row in enumerate(rows):
        if i % 2 == 0:
            row["nDCG@10"] = max(0.0, row["nDCG@10"] - 0.5)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = json.loads((b / "summary.json").read_text())
    check = summary["datasets"]["pydocs"]["variants"]["int8-vectors"]["gate"]["checks"][0]
    check["verdict"], check["passed"] = "fail", False
    (b / "summary.json").write_text(json.dumps(summary))
    manifest = json.loads((b / "manifest.json").read_text())
    manifest["versions"]["torch"] = "9.9.9"
    (b / "manifest.json").write_text(json.dumps(manifest))

    c = compare_runs(a, b)
    moved = {(m.variant, m.metric): m for m in c.changed}
    assert list(moved) == [("int8-vectors", "nDCG@10")]
    m = moved[("int8-vectors", "nDCG@10")]
    assert m.change == "lower" and m.ci_high < 0
    before = np.array([json.loads(line)["nDCG@10"] for line in
                       (a / "per_query/pydocs/int8-vectors.jsonl").read_text().splitlines()])
    assert m.delta == np.mean(np.array([r["nDCG@10"] for r in rows]) - before)
    # 40 identical queries cannot certify a 1% margin (the sparse-data rule): inconclusive
    assert [(v.variant, v.a, v.b) for v in c.verdicts] == [("int8-vectors", "inconclusive",
                                                           "fail")]
    assert [(s.key, s.a, s.b) for s in c.settings] == [("versions.torch",
                                                        manifest_torch(a), "9.9.9")]
    text, md = render_text(c), render_markdown(c)
    assert "lower" in text and "verdict changed: int8-vectors" in text
    assert "| int8-vectors | nDCG@10 |" in md and "**lower**" in md


def manifest_torch(run: Path) -> str:
    return json.loads((run / "manifest.json").read_text())["versions"]["torch"]


def test_compare_across_datasets_exits_2_naming_the_difference(report_runs, capsys) -> None:
    code = main(["compare", str(report_runs.small), str(report_runs.other_slice)])
    assert code == 2
    err = capsys.readouterr().err
    assert "not comparable" in err and "'pydocs' fingerprint differs" in err
    assert "40 queries" in err and "30 /" in err


def test_compare_of_an_unfinished_run_exits_2(report_runs, capsys) -> None:
    assert main(["compare", str(report_runs.small), str(report_runs.failed)]) == 2
    assert "did not finish" in capsys.readouterr().err
