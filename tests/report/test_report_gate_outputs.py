"""CI outputs of `evalq gate` and `evalq run`: JUnit validated against a JUnit schema and
counted against the stored verdicts, the markdown job summary, and the terminal summary
that fits 100 columns."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema

from evalq.app.cli import main
from evalq.report.compact import print_compact
from evalq.report.console import print_run_table
from evalq.report.runview import RunView

SCHEMA = Path(__file__).resolve().parents[1] / "data" / "junit.xsd"


def _checks(summary: dict) -> list[tuple[str, dict]]:
    return [(name, check) for ds in summary["datasets"].values()
            for name, v in ds["variants"].items() for check in (v.get("gate") or {}).get(
                "checks", [])]


@pytest.mark.slow
@pytest.mark.model
def test_junit_validates_and_counts_the_stored_verdicts(report_runs, tmp_path: Path) -> None:
    run = report_runs.small
    junit, summary_md = tmp_path / "junit.xml", tmp_path / "summary.md"
    code = main(["gate", str(run), "--junit", str(junit), "--markdown", str(summary_md)])
    summary = json.loads((run / "summary.json").read_text())
    assert code == (0 if summary["passed"] else 1)

    schema = xmlschema.XMLSchema(SCHEMA)
    schema.validate(junit)  # raises with the offending element if invalid
    checks = _checks(summary)
    failed = [c for _, c in checks if not c["passed"]]
    root = ET.parse(junit).getroot()
    cases = root.findall(".//testcase")
    assert len(cases) == len(checks) == int(root.get("tests"))
    assert len(root.findall(".//testcase/failure")) == len(failed) == int(root.get("failures"))
    assert failed, "the small run has a failing variant (binary-plain), so failures are counted"
    reasons = {f.get("message") for f in root.iter("failure")}
    assert reasons == {c["reason"] for c in failed}

    # The schema is strict enough to refuse a broken file.
    broken = tmp_path / "broken.xml"
    broken.write_text(junit.read_text().replace('tests="', 'tests="-', 1))
    assert not schema.is_valid(broken)


@pytest.mark.slow
@pytest.mark.model
def test_markdown_job_summary_names_verdicts_and_recommendation(report_runs,
                                                               tmp_path: Path) -> None:
    run = report_runs.small
    out = tmp_path / "summary.md"
    main(["gate", str(run), "--markdown", str(out)])
    text = out.read_text()
    summary = json.loads((run / "summary.json").read_text())
    assert text.startswith("## evalq · report-small: ")
    assert "**Recommendation** (cheapest by index bytes)" in text
    for name, v in summary["variants"].items():
        if v["role"] == "candidate":
            row = next(line for line in text.splitlines() if line.startswith(f"| {name} |"))
            assert ("✅ may ship" in row) == bool(v["passed"])
    for _, check in _checks(summary):
        if not check["passed"]:
            assert check["gate"] in text


@pytest.mark.slow
@pytest.mark.model
def test_compact_terminal_summary_fits_100_columns(report_runs, capsys) -> None:
    run = report_runs.small
    summary = json.loads((run / "summary.json").read_text())
    print_compact(RunView.load(run))
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 100
    rows = {line.split()[0]: line for line in lines if line.split()}
    for name in ("fp32", "dyn-int8", "int8-vectors", "binary-plain"):
        assert name in rows  # one row per variant
    assert "reference" in rows["fp32"]
    entry = summary["datasets"]["pydocs"]["variants"]["binary-plain"]["metrics"]["nDCG@10"]
    assert f"{entry['vs_reference']['delta']:+.4f}" in rows["binary-plain"]
    assert "FAIL" in rows["binary-plain"]
    assert "recommendation:" in out and "--wide" in out

    print_run_table(RunView.load(run), wide=True)
    wide = capsys.readouterr().out
    assert max(len(line) for line in wide.splitlines()) > 100  # the full table
    assert "RBO@100" in wide


@pytest.mark.slow
@pytest.mark.model
def test_bracketed_labels_reach_the_terminal_verbatim(report_runs, capsys) -> None:
    """Batch-composition checks are labelled "[batch composition tokens-8192 on 40
    queries]"; rich read that as a markup tag and printed nothing in its place."""
    run = report_runs.small
    manifest = json.loads((run / "manifest.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    label = "[batch composition tokens-8192 on 40 queries]"
    failing = next((name, check) for name, check in _checks(summary) if not check["passed"])
    failing[1]["gate"] += f" {label}"
    failing[1]["reason"] += " [bold]not markup[/bold]"
    summary["warnings"] = [*summary.get("warnings", []), f"a warning {label}"]
    view = RunView.of(run, manifest, summary)
    print_compact(view)
    compact = capsys.readouterr().out.replace("\n", " ")
    print_run_table(view, wide=True)
    wide = capsys.readouterr().out.replace("\n", " ")
    for out in (compact, wide):
        assert out.count(label) >= 2 and "[bold]not markup[/bold]" in out


@pytest.mark.parametrize("folder", ["nowhere", "file"])
def test_report_of_a_non_results_folder_is_bad_input(folder: str, tmp_path: Path,
                                                     capsys) -> None:
    target = tmp_path / folder
    if folder == "file":
        target.mkdir()
        (target / "manifest.json").write_text("{not json")
    code = main(["report", str(target), "-o", str(tmp_path / "r.html")])
    assert code == 2
    err = capsys.readouterr().err
    assert str(target) in err and "Fix:" in err
