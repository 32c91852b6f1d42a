"""A recipe whose candidate sweeps FAISS's efSearch, run end to end on the real MiniLM
(issue 30): the sweep is an added part of the summary, ``evalq gate`` re-decides it from
the folder, every report shows it, and the candidate's own verdict and run file are those
of the same candidate without the sweep."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalq.app.api import run_recipe_file
from evalq.app.cli import main
from evalq.report.console import print_run_table
from evalq.report.markdown import run_summary_markdown
from evalq.report.page import render_run
from evalq.report.runview import RunView
from support import recipes

INDEX = {"factory": "HNSW8", "search": {"efSearch": 16}}
SWEPT = [1, 2, 4, 16, 64]


def _recipe(cache: Path, sweep: bool) -> dict[str, Any]:
    index = {**INDEX, **({"sweep": {"efSearch": SWEPT}} if sweep else {})}
    return recipes.recipe(
        "sweep-run", cache=cache, queries=60, docs=300,
        candidates=[{"name": "hnsw", "index": index}],
        metrics=["nDCG@10", "R@100"], reference_metrics=["overlap@10", "cosine"],
        gates=[recipes.gate("nDCG@10", "qrels", max_drop="5%"),
               recipes.gate("overlap@10", "reference", min=0.8, loss="index")],
        resamples=500)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("sweep")
    out = {}
    for label, sweep in (("swept", True), ("plain", False)):
        path = recipes.write(base / f"{label}.yaml", _recipe(base / "cache", sweep))
        outcome = run_recipe_file(path, output=base / label, progress=False)
        out[label] = (outcome, base / label)
    return out


@pytest.mark.slow
@pytest.mark.model
def test_a_sweep_is_an_added_part_and_changes_nothing_else(runs: dict[str, Any]) -> None:
    (swept, root), (plain, plain_root) = runs["swept"], runs["plain"]
    entry = swept.summary["datasets"]["pydocs"]["variants"]["hnsw"]
    sweep = entry["sweep"]
    assert sweep["parameter"] == "efSearch" and sweep["configured"] == 16
    assert [p["value"] for p in sweep["points"]] == SWEPT
    assert sweep["procedure"] == "fixed_sequence"
    for p in sweep["points"]:
        assert 0 <= p["recall_at_10"] <= 1 and p["p50_ms"] > 0 and p["queries_per_s"] > 0
        assert p["ndcg_at_10"] is not None and p["overlap_at_10"] is not None
    if sweep["cheapest"] is not None:
        assert any(p["certified"] and p["value"] == sweep["cheapest"] for p in sweep["points"])
    # the candidate's own verdict, gates and run are its configured efSearch's
    plain_entry = plain.summary["datasets"]["pydocs"]["variants"]["hnsw"]
    assert entry["gate"] == plain_entry["gate"]
    assert swept.summary["variants"]["hnsw"]["verdict"] == \
        plain.summary["variants"]["hnsw"]["verdict"]
    run_file = Path("runs") / "pydocs" / "hnsw.trec"
    assert (root / run_file).read_text() == (plain_root / run_file).read_text()
    assert "sweep" not in plain_entry or plain_entry["sweep"] is None


@pytest.mark.slow
@pytest.mark.model
def test_evalq_gate_redecides_the_sweep_and_the_reports_show_it(
        runs: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    swept, root = runs["swept"]
    before = swept.summary["datasets"]["pydocs"]["variants"]["hnsw"]["sweep"]
    main(["gate", str(root)])
    after = json.loads((root / "summary.json").read_text())
    assert after["datasets"]["pydocs"]["variants"]["hnsw"]["sweep"] == before
    view = RunView.load(root)
    html = render_run(view)
    assert 'id="sweep"' in html and "recall@10 vs exact kNN" in html
    markdown = run_summary_markdown(view)
    assert "### Search-time parameter sweep" in markdown and "efSearch=64" in markdown
    capsys.readouterr()
    print_run_table(view, wide=True)
    assert "search-time sweeps" in capsys.readouterr().out
