"""The report's grid-search sections from a hand-written ``search`` part: the HTML
section (frontier plot, marks, recommendation, error-control line, table of points) and
the markdown job summary (table and recommendation). A summary without a search has no
search section. (In a real browser: test_report_browser.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from search_summaries import HOSTILE, search_manifest, search_summary, write_search_folder

from evalq.report.markdown import run_summary_markdown
from evalq.report.page import render_run
from evalq.report.runview import RunView
from support.summaries import summary


def _figures(html: str) -> list[dict[str, Any]]:
    block = re.search(r'<script type="application/json" id="evalq-figures">(.*?)</script>',
                      html, flags=re.DOTALL)
    assert block
    return json.loads(block.group(1))


def _search_html(html: str) -> str:
    found = re.search(r'<section id="search">(.*?)</section>', html, flags=re.DOTALL)
    assert found, "no search section"
    return found.group(1)


def _search_figure(html: str) -> dict[str, Any]:
    index = int(re.search(r'data-fig="(\d+)"', _search_html(html)).group(1))  # type: ignore
    return _figures(html)[index]


def test_html_search_section_draws_every_point_marked(tmp_path: Path) -> None:
    html = render_run(RunView.load(write_search_folder(tmp_path / "run")))
    part = _search_html(html)
    # the error-control line, the recommendation, the table of every point
    assert ("explore 150 / confirm 150 queries, seed 7, Holm over 4 survivors, family-wise "
            "α = 0.025, first-round per-test α = 0.025/4 = 0.00625") in part
    assert "Recommendation:" in part and "int8-w/int8/384" in part
    assert part.count("<tr>") == 1 + 6
    assert HOSTILE not in part and "&lt;img src=x onerror" in part
    fig = _search_figure(html)
    traces = {t["name"]: t for t in fig["data"]}
    marks = {"certified (2)": 2, "failed (1)": 1, "inconclusive (1)": 1,
             "not confirmed (2)": 2}
    for name, count in marks.items():
        assert len(traces[name]["x"]) == count, name
    symbols = {traces[n]["marker"]["symbol"] for n in marks}
    assert len(symbols) == 4  # distinct markers per mark
    # the frontier is connected cheapest first, through the frontier's own points
    line = traces["Pareto frontier"]
    assert line["mode"] == "lines"
    assert line["x"] == [48.0, 380.0, 384.0, 1536.0]
    assert line["y"] == [0.498, 0.507, 0.509, 0.512]
    star = traces["recommendation: int8-w/int8/384"]
    assert star["x"] == [380.0] and star["y"] == [0.507]
    labels = [a["text"] for a in fig["layout"]["annotations"]]
    assert "int8-w/int8/384" in labels
    assert fig["layout"]["xaxis"]["title"]["text"] == "cost: index_bytes"


def test_html_without_a_certified_point_says_so(tmp_path: Path) -> None:
    html = render_run(RunView.load(write_search_folder(tmp_path / "run", None)))
    part = _search_html(html)
    assert "nothing certified" in part and "keep the reference" in part
    names = [t["name"] for t in _search_figure(html)["data"]]
    assert not any(n.startswith("recommendation") for n in names)
    assert "certified (2)" not in names and "inconclusive (3)" in names


def test_no_search_no_section(tmp_path: Path) -> None:
    plain = summary({"fp32": {"role": "reference", "passed": True},
                     "int8": {"role": "candidate", "passed": True}})
    view = RunView.of(tmp_path, search_manifest(), plain)
    assert '<section id="search">' not in render_run(view)
    assert "Grid search" not in run_summary_markdown(view)


def test_markdown_has_the_table_and_the_recommendation(tmp_path: Path) -> None:
    view = RunView.of(tmp_path, search_manifest(), search_summary())
    text = run_summary_markdown(view)
    assert "**Search recommendation**: int8-w/int8/384" in text
    assert "Holm over 4 survivors" in text
    rows = [line for line in text.splitlines() if line.startswith("| ")
            and "|---" not in line]
    table = rows[rows.index(next(r for r in rows if r.startswith("| point |"))) + 1:]
    assert len(table) == 6
    names = [r.split(" | ")[0].removeprefix("| ") for r in table]
    # frontier points first, cheapest first, then the rest by cost
    assert names[:4] == ["int8-w/binary+rescore10/384", "int8-w/int8/384", "fp32/int8/384",
                         "fp32/none/384"]
    assert names[4].startswith("&lt;img") and names[5] == "fp32/binary/384"
    marks = {n: r for n, r in zip(names, table)}
    assert "✅ certified" in marks["int8-w/int8/384"]
    assert "| exact | 0.9875 | 384 | 0.509 | pass | ✅ certified |" in marks["fp32/int8/384"]
    assert "| exact | — | 1536 |" in marks["fp32/none/384"]  # an older run: not recorded
    assert "❌ failed" in marks[names[4]]
    assert "➖ not confirmed" in marks["fp32/binary/384"]
    assert HOSTILE not in text


def test_a_search_with_no_survivor_says_so(tmp_path: Path) -> None:
    data = search_summary(None)
    data["search"]["survivors"] = 0
    for point in data["search"]["points"]:
        point["explore"], point["mark"], point["alpha"] = "fail", "not confirmed", None
    text = run_summary_markdown(RunView.of(tmp_path, search_manifest(), data))
    assert "no survivor to confirm" in text and "/0" not in text
    assert text.count("➖ not confirmed") == 6
