"""A results folder names its host: the manifest, the summary, the report and console
headers and the JUnit file carry the host facts and the numerics class; ``evalq gate``
says which class a verdict was certified on and ``evalq compare`` warns across classes.

Uses the session's shared report folders (one real run, reused), copied where a folder
of another class is needed.
"""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from evalq.app.cli import main
from evalq.core.host import current_class
from evalq.report.compact import print_compact
from evalq.report.page import render_run
from evalq.report.runview import RunView
from evalq.results.folder import RunFolder

pytestmark = [pytest.mark.slow, pytest.mark.model]
OTHER = "x86-64/another-class"


def _with_class(src: Path, dst: Path, numerics: str | None) -> Path:
    """A copy of a folder as another class's host would have written it (None: as a
    folder written before host facts)."""
    shutil.copytree(src, dst)
    for name in ("manifest.json", "summary.json"):
        data = json.loads((dst / name).read_text())
        if numerics is None:
            data.pop("host")
        else:
            data["host"]["numerics_class"] = numerics
        (dst / name).write_text(json.dumps(data))
    return dst


def test_manifest_and_summary_carry_the_host(report_runs) -> None:
    folder = RunFolder(report_runs.small)
    manifest, summary = folder.read_manifest(), folder.read_summary()
    assert manifest.host is not None and summary.host is not None
    assert summary.host == manifest.host
    assert summary.host.numerics_class == current_class()
    assert summary.host.cores and summary.host.os and summary.host.arch
    assert summary.host.engines.get("torch")
    # The run loaded torch (dynamic int8): what it chose is asked once it is loaded.
    assert summary.host.engine_choices["torch"]["cpu_capability"]


def test_headers_and_junit_name_the_class(report_runs, tmp_path: Path, capsys) -> None:
    run = RunView.load(report_runs.small)
    klass = current_class()
    assert klass in render_run(run)
    print_compact(run)
    out = capsys.readouterr().out
    assert out.startswith("host: ") and klass in out.splitlines()[0]
    junit = tmp_path / "junit.xml"
    main(["gate", str(report_runs.small), "--junit", str(junit)])
    out = capsys.readouterr().out
    assert f"certified on: {klass}" in out and "different numerics classes" not in out
    props = {p.get("name"): p.get("value") for p in ET.parse(junit).getroot().iter("property")}
    assert props["evalq.host.numerics_class"] == klass
    assert props["evalq.host.engines.torch"]


def test_gate_warns_when_this_machine_is_of_another_class(report_runs, tmp_path: Path,
                                                         capsys) -> None:
    other = _with_class(report_runs.small, tmp_path / "other", OTHER)
    main(["gate", str(other)])
    out = capsys.readouterr().out
    assert f"certified on: {OTHER}" in out
    assert f"the folder on {OTHER}" in out and f"this machine on {current_class()}" in out


def test_an_old_folder_without_host_facts_still_reads(report_runs, tmp_path: Path,
                                                      capsys) -> None:
    old = _with_class(report_runs.small, tmp_path / "old", None)
    assert RunView.load(old).host is None
    main(["gate", str(old)])
    assert "certified on: an unrecorded numerics class" in capsys.readouterr().out
    assert "host unknown" in render_run(RunView.load(old))


def test_compare_warns_across_classes_only(report_runs, tmp_path: Path, capsys) -> None:
    run = report_runs.small
    assert main(["compare", str(run), str(run)]) == 0
    assert "different numerics classes" not in capsys.readouterr().out
    other = _with_class(run, tmp_path / "other", OTHER)
    assert main(["compare", str(run), str(other)]) == 0
    out = capsys.readouterr().out
    assert f"A on {current_class()}" in out and f"B on {OTHER}" in out


def test_history_names_each_runs_class_and_warns_when_they_differ(report_runs,
                                                                  tmp_path: Path) -> None:
    from evalq.report.history import render_history

    run = RunView.load(report_runs.small)
    same = render_history([run, RunView.load(report_runs.small)])
    assert current_class() in same and "different numerics classes" not in same
    other = RunView.load(_with_class(report_runs.small, tmp_path / "other", OTHER))
    assert "different numerics classes" in render_history([run, other])
