"""A search decided from a results folder (issue 31): explore on one half, prune to the
cheapest survivors, confirm with Holm on the other half, the frontier, the cheapest
certified recommendation and the exit. Hand-built per-query values with known truths,
so each mark can be predicted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalq.core.errors import InputError
from evalq.core.values import PerQuery
from evalq.decide.search import split_queries
from evalq.execute.search_decide import decide_search, subset
from evalq.plan.gates import GateConfig, StatsOptions
from evalq.plan.load import CapacitySection
from evalq.plan.run import ReportOptions, RunSections
from evalq.plan.search import SearchPlan, SearchSection, build_grid
from evalq.report.search_console import search_text
from evalq.results.folder import RunFolder
from evalq.results.searchpart import SearchSummary

N = 400
IDS = tuple(f"q{i:03d}" for i in range(N))


def _sections(**gate: Any) -> RunSections:
    rule = gate or {"max_drop": 0.05}
    return RunSections(recipe="t", reference="fp32", metrics=("nDCG@10",),
                       reference_metrics=(),
                       gates=(GateConfig(metric="nDCG@10", against="qrels", **rule),),
                       stats=StatsOptions(resamples=1000), report=ReportOptions(),
                       title_separator=" ")


def _plan(survivors: int = 2) -> SearchPlan:
    section = SearchSection.model_validate(
        {"weights": ["fp32", "q"], "vectors": [{"quantize": "none"},
                                               {"quantize": "binary", "rescore": 10}],
         "survivors": survivors})
    combos, skipped = build_grid(section)
    return SearchPlan(section, combos, skipped, datasets=1, alpha=0.025,
                      texts_per_weight=None)


# What each combination's values are: the reference's, minus a drop on some queries.
DROPS = {"s.fp32.none.full": 0.0,  # identical: certifiable
         "s.fp32.binary+rescore10.full": 0.5,  # far past the margin: fails on explore
         "s.q.none.full": 0.0,
         "s.q.binary+rescore10.full": 0.02}  # a little worse on a few queries
INDEX_BYTES = {"s.fp32.none.full": 4000, "s.fp32.binary+rescore10.full": 100,
               "s.q.none.full": 4000, "s.q.binary+rescore10.full": 100}


def _folder(tmp_path: Path, drops: dict[str, float] = DROPS) -> tuple[RunFolder, dict]:
    folder = RunFolder(tmp_path / "run")
    folder.prepare()
    rng = np.random.default_rng(1)
    ref = rng.uniform(0.3, 1.0, N)
    folder.write_per_query("d", "fp32", PerQuery(IDS, {"nDCG@10": ref}))
    for name, drop in drops.items():
        hit = rng.uniform(size=N) < 0.3  # 30 % of queries lose `drop`
        # never below 0: a stored nDCG outside [0, 1] is a damaged file
        folder.write_per_query("d", name, PerQuery(IDS, {"nDCG@10": np.maximum(
            ref - hit * drop, 0.0)}))

    def entry(weights: str, rate: float | None) -> dict[str, Any]:
        combos = {n: {"index_bytes": b, "dims": 8} for n, b in INDEX_BYTES.items()
                  if n.startswith(f"s.{weights}.")}
        return {"role": "reference" if weights == "fp32" else "candidate",
                "backend": {"quantization": {"weight_bytes": 1000 if weights == "fp32"
                                             else 250}},
                "datasets": {"d": {"encode": {"documents": {"texts_per_s": rate},
                                              "queries": {"texts_per_s": rate}},
                                   "search": {"combinations": combos}}}}
    return folder, {"fp32": entry("fp32", 100.0), "q": entry("q", 300.0)}


def test_marks_follow_the_procedure(tmp_path: Path) -> None:
    folder, variants = _folder(tmp_path)
    result = decide_search(_plan(), _sections(), variants, folder)
    points = {p.name: p for p in result.points}
    assert points["s.fp32.binary+rescore10.full"].explore == "fail"
    assert points["s.fp32.binary+rescore10.full"].mark == "not confirmed"
    # the two cheapest that did not fail on explore form the family
    assert result.survivors == 2
    family = {n for n, p in points.items() if p.mark != "not confirmed"}
    assert "s.q.binary+rescore10.full" in family and len(family) == 2
    for name in family:
        assert points[name].alpha is not None
    certified = {n for n, p in points.items() if p.mark == "certified"}
    assert certified  # identical values on 200 confirm queries certify a 5 % drop
    # the recommendation is the cheapest certified point (index bytes, then quality)
    best = min((points[n] for n in certified), key=lambda p: (p.cost, -(p.quality or 0)))
    assert result.recommendation == best.name
    assert result.split.explore_queries == 200 and result.split.confirm_queries == 200
    assert result.encodings == 2 and result.correction == "holm"
    assert SearchSummary.model_validate(result.model_dump()) == result  # the typed part


def test_quality_is_the_explore_mean(tmp_path: Path) -> None:
    folder, variants = _folder(tmp_path)
    result = decide_search(_plan(), _sections(), variants, folder)
    split = split_queries(IDS, seed=0, explore_fraction=0.5, min_confirm=10)
    values = folder.read_per_query("d", "s.q.binary+rescore10.full")
    expected = float(np.mean(subset(values, split.explore).values["nDCG@10"]))
    point = next(p for p in result.points if p.name == "s.q.binary+rescore10.full")
    assert point.quality == pytest.approx(expected, abs=1e-12)


def test_frontier_is_the_undominated_points(tmp_path: Path) -> None:
    folder, variants = _folder(tmp_path)
    result = decide_search(_plan(), _sections(), variants, folder)
    on = [p for p in result.points if p.frontier]
    assert [p.name for p in sorted(on, key=lambda p: p.cost)] == result.frontier
    for p in result.points:
        dominated = any(q.cost <= p.cost and (q.quality or 0) >= (p.quality or 0)
                        and (q.cost < p.cost or (q.quality or 0) > (p.quality or 0))
                        for q in result.points)
        assert p.frontier == (not dominated)


def test_nothing_certified_means_no_recommendation(tmp_path: Path) -> None:
    folder, variants = _folder(tmp_path, {n: 0.5 for n in DROPS})
    result = decide_search(_plan(), _sections(), variants, folder)
    assert result.recommendation is None
    assert all(p.mark == "not confirmed" for p in result.points)
    assert "search recommendation: none" in search_text(result)


def test_other_costs_and_the_console_table(tmp_path: Path) -> None:
    folder, variants = _folder(tmp_path)
    plan = _plan()
    by_weight = plan.section.model_copy(update={"cost": "weight_bytes"})
    result = decide_search(SearchPlan(by_weight, plan.combinations, 0, 1, 0.025, None),
                           _sections(), variants, folder)
    points = {p.name: p for p in result.points}
    assert points["s.q.none.full"].cost == 250 and points["s.fp32.none.full"].cost == 1000
    by_rate = plan.section.model_copy(update={"cost": "queries_per_s"})
    result = decide_search(SearchPlan(by_rate, plan.combinations, 0, 1, 0.025, None),
                           _sections(), variants, folder)
    points = {p.name: p for p in result.points}
    assert points["s.q.none.full"].cost == pytest.approx(1 / 300)  # a rate's inverse
    text = search_text(result)
    assert "300/s" in text and "combination" in text and "frontier" in text


def test_a_cost_the_run_did_not_measure_is_bad_input(tmp_path: Path) -> None:
    folder, variants = _folder(tmp_path)
    for v in variants.values():  # encodings read from the cache have no rate
        v["datasets"]["d"]["encode"]["queries"]["texts_per_s"] = None
    plan = _plan()
    by_rate = plan.section.model_copy(update={"cost": "queries_per_s"})
    with pytest.raises(InputError) as err:
        decide_search(SearchPlan(by_rate, plan.combinations, 0, 1, 0.025, None),
                      _sections(), variants, folder)
    assert err.value.field == "search.cost" and "--no-cache" in (err.value.fix or "")


def test_dollars_per_million_queries_from_the_capacity_price(tmp_path: Path) -> None:
    folder, variants = _folder(tmp_path)
    plan = _plan()
    by_price = plan.section.model_copy(update={"cost": "dollars_per_million_queries"})
    capacity = CapacitySection(target_qps=10, dollars_per_replica_hour={"q": 3.0,
                                                                        "default": 1.0})
    result = decide_search(SearchPlan(by_price, plan.combinations, 0, 1, 0.025, None),
                           _sections(), variants, folder, capacity)
    points = {p.name: p for p in result.points}
    # one replica at the measured query rate: price / (queries/s × 3600) per query
    assert points["s.q.none.full"].cost == pytest.approx(3.0 / (300 * 3600) * 1e6)
    assert points["s.fp32.none.full"].dollars_per_million_queries == pytest.approx(
        1.0 / (100 * 3600) * 1e6)
