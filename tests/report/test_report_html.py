"""The report's content without a browser: the verdict and recommendation agree with the
stored results, the page is self-contained, the section registry refuses duplicates, a
history needs runs of one recipe. (Rendering and escaping in a browser:
test_report_browser.py.)"""

from __future__ import annotations

import html as html_lib
import json
import re
import shutil
from pathlib import Path

import pytest

from evalq.app.cli import main
from evalq.report.page import render_run
from evalq.report.retrieval_cost_sections import pareto_front
from evalq.report.runview import RunView
from evalq.report.sections import section
from evalq.report.verdict import candidate_verdicts, costs, recommend


@pytest.mark.slow
@pytest.mark.model
def test_verdicts_and_recommendation_follow_the_stored_results(report_runs) -> None:
    run = RunView.load(report_runs.small)
    summary = json.loads((report_runs.small / "summary.json").read_text())
    verdicts = {v.name: v for v in candidate_verdicts(run)}
    for name, v in summary["variants"].items():
        if v["role"] == "candidate":
            assert (verdicts[name].status == "ship") == v["passed"]
    failed = verdicts["binary-plain"]
    assert failed.status in ("fail", "inconclusive") and failed.failures
    rec = recommend(run)
    passing = [n for n, v in verdicts.items() if v.status == "ship"]
    assert run.cost_key == "index_bytes"  # the recipe says report: {cost: index_bytes}
    if passing:
        best = min(costs(run, n).index_bytes for n in passing)
        assert rec.variant in passing and costs(run, rec.variant).index_bytes == best
    else:
        assert rec.variant is None and "keep serving fp32" in rec.text
    entry = summary["datasets"]["pydocs"]["variants"]["int8-vectors"]
    assert costs(run, "int8-vectors").index_bytes == entry["index"]["bytes"]


@pytest.mark.slow
@pytest.mark.model
def test_page_is_self_contained(report_runs) -> None:
    html = render_run(RunView.load(report_runs.small))
    assert "Plotly" in html and "<script src" not in html and "<link" not in html
    markup = re.sub(r"<script[^>]*>.*?</script>", "", html, flags=re.DOTALL)
    assert markup.count("<section") == 7
    assert not re.search(r"(src|href)=\"(https?:)?//", markup)
    csp = re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"', html)
    assert csp
    policy = html_lib.unescape(csp.group(1))
    assert "default-src 'none'" in policy
    assert "unsafe-inline" not in policy.split("script-src")[1].split(";")[0]


def test_pareto_front() -> None:
    points = [("a", 10.0, 0.0), ("b", 5.0, -0.01), ("c", 6.0, -0.02), ("d", 1.0, -0.3)]
    assert pareto_front(points, higher_cost_better=False) == {"a", "b", "d"}
    # throughput: more is better
    assert pareto_front(points, higher_cost_better=True) == {"a"}


def test_section_registry_refuses_a_second_registration() -> None:
    with pytest.raises(ValueError, match="already registered"):
        section("verdict", "again", kind="retrieval", order=1)(lambda run, page: "")


@pytest.mark.slow
@pytest.mark.model
def test_history_refuses_runs_of_different_recipes(report_runs, tmp_path: Path,
                                                   capsys) -> None:
    other = tmp_path / "other"
    shutil.copytree(report_runs.small, other)
    for name in ("manifest.json", "summary.json"):
        data = json.loads((other / name).read_text())
        if name == "summary.json":
            data["recipe"] = "something-else"
        else:
            data["recipe"]["name"] = "something-else"
        (other / name).write_text(json.dumps(data))
    code = main(["report", str(report_runs.small), str(other), "-o",
                 str(tmp_path / "h.html")])
    assert code == 2
    err = capsys.readouterr().err
    assert "one recipe" in err and "something-else" in err
