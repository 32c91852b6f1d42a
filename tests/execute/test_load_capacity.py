"""Capacity arithmetic: replicas from knees and demand, cost per million queries, and the
decision table, checked against hand-computed numbers."""

from __future__ import annotations

import math

import pytest

from evalq.execute.load.capacity import DecisionRow, Demand, Knee, plan_variant, recommend
from evalq.plan.load import CapacitySection
from support.summaries import check, summary


def test_query_only_plan() -> None:
    # 50 qps on replicas that hold 12 req/s at the SLO, at most 80% busy: 50/12/0.8 = 5.2 -> 6
    plan = plan_variant("fp32", {"query": Knee("query", 12.0, "requests/s")},
                        Demand(target_qps=50, headroom=0.8), price_per_hour=2.0)
    assert plan.feasible and plan.replicas == 6
    assert plan.load == pytest.approx(50 / 12)
    assert plan.dollars_per_hour == 12.0
    # $12/h for 50 q/s = 180,000 queries/h -> $66.67 per million
    assert plan.dollars_per_million_queries == pytest.approx(12.0 / 180_000 * 1e6)


def test_shared_replicas_add_the_workloads_shares() -> None:
    knees = {"query": Knee("query", 100.0, "requests/s"),
             "rerank": Knee("rerank", 1000.0, "pairs/s"),
             "ingest": Knee("ingest", 50.0, "texts/s")}
    demand = Demand(target_qps=20, rerank_depth=50, ingest_docs_per_day=86_400 * 10,
                    headroom=1.0)
    plan = plan_variant("v", knees, demand, price_per_hour=None)
    # query 20/100 = 0.2; rerank 20*50/1000 = 1.0; ingest 10 docs/s / 50 = 0.2
    assert plan.shares == pytest.approx({"query": 0.2, "rerank": 1.0, "ingest": 0.2})
    assert plan.replicas == 2 and plan.dollars_per_hour is None


def test_exact_multiple_does_not_round_up_and_min_replicas_holds() -> None:
    plan = plan_variant("v", {"query": Knee("query", 10.0, "requests/s")},
                        Demand(target_qps=30, headroom=1.0), 1.0)
    assert plan.replicas == 3
    tiny = plan_variant("v", {"query": Knee("query", 1000.0, "requests/s")},
                        Demand(target_qps=1, headroom=0.8, min_replicas=2), 1.0)
    assert tiny.replicas == 2


def test_no_knee_is_infeasible_and_a_lower_bound_is_noted() -> None:
    plan = plan_variant("v", {"query": Knee("query", None, "requests/s",
                                            reason="the SLO broke at the first step")},
                        Demand(target_qps=5), 1.0)
    assert not plan.feasible and plan.replicas is None
    assert "more replicas do not make one request faster" in plan.notes[0]
    bound = plan_variant("v", {"query": Knee("query", 8.0, "requests/s", lower_bound=True)},
                         Demand(target_qps=5, headroom=1.0), 1.0)
    assert bound.replicas == 1 and "at least 8" in bound.notes[0]
    missing = plan_variant("v", {"query": Knee("query", 8.0, "requests/s")},
                           Demand(target_qps=5, rerank_depth=20, headroom=1.0), 1.0)
    assert missing.feasible and "no 'rerank' workload" in missing.notes[0]


def test_decision_sentences_and_recommendation_prefer_cheapest_passing() -> None:
    demand = Demand(target_qps=50, headroom=1.0)
    fast_bad = DecisionRow("dyn-int8", "fail", "not checked",
                           plan_variant("dyn-int8", {"query": Knee("query", 50.0, "r/s")},
                                        demand, 1.0))
    good = DecisionRow("bnb-int8", "pass", "not checked",
                       plan_variant("bnb-int8", {"query": Knee("query", 17.0, "r/s")},
                                    demand, 1.0))
    ref = DecisionRow("fp32", "reference", "ok",
                      plan_variant("fp32", {"query": Knee("query", 10.0, "r/s")}, demand, 1.0))
    assert good.sentence() == "bnb-int8: passes quality, 3 replicas, $16.67 per 1M queries"
    assert ref.sentence().startswith("fp32: reference, 5 replicas")
    rec = recommend([fast_bad, good, ref])
    assert rec is not None and "bnb-int8" in rec and "dyn-int8" not in rec
    assert recommend([fast_bad]) is None


def test_prices_per_variant_with_default() -> None:
    cap = CapacitySection(target_qps=1, dollars_per_replica_hour={"default": 2.5, "gpu": 4})
    assert cap.price("gpu") == 4.0 and cap.price("other") == 2.5
    assert CapacitySection(target_qps=1, dollars_per_replica_hour={"gpu": 4}).price("x") is None
    assert math.isclose(CapacitySection(target_qps=1).price("x") or 0, 1.0)


def test_closed_loop_knee_is_the_best_passing_step_not_the_last() -> None:
    """Measured on load-cpu.yaml: vLLM's ingest with 32-text batches did 7.0 texts/s with
    one client and 4.9 with two (both under the SLO); the knee is 7.0, and a broken step
    ends its series (what follows it does not count)."""
    from evalq.execute.load.sweep import knee_of
    from evalq.plan.load import Workload

    workload = Workload.model_validate({"name": "ingest", "kind": "ingest", "slo_p99_ms": 15000,
                                        "batch_sizes": [8, 32],
                                        "closed_loop": {"concurrency": [1, 2, 4]}})

    def step(verdict: str, texts_per_s: float, clients: int) -> dict:
        return {"verdict": verdict, "texts_per_s": texts_per_s, "reasons": [],
                "level": clients}

    knee, series = knee_of(workload, {
        "batch=8": [step("pass", 6.1, 1), step("pass", 5.4, 2), step("pass", 5.0, 4)],
        "batch=32": [step("pass", 7.0, 1), step("pass", 4.9, 2), step("slo", 9.0, 4)]})
    assert (knee.per_s, series, knee.unit) == (7.0, "batch=32", "texts/s")
    assert knee.lower_bound is False  # batch=32 broke its SLO at 4 clients
    assert knee.level == 1  # the table reads the knee's p99 from this step


def test_quality_verdict_tells_inconclusive_from_failed(tmp_path) -> None:
    """Servers equal to the reference on 30 queries cannot be certified at a 1% margin:
    the decision table said "FAILS quality" for them before."""
    import json

    from evalq.results.load import quality_verdicts

    (tmp_path / "summary.json").write_text(json.dumps(summary({
        "fp32": {"role": "reference", "passed": None},
        # written before summaries stored a verdict: decided again from the stored checks
        "same": {"role": "candidate", "passed": False,
                 "suite_checks": [check("pass", "parity preflight (float32, same texts)")]},
        "worse": {"role": "candidate", "passed": False},
        "good": {"role": "candidate", "passed": True},
        # no gate applies: measured, never certified
        "free": {"role": "candidate", "passed": None, "verdict": "ungated"},
        # a stored verdict is read as stored
        "noisy": {"role": "candidate", "passed": False, "verdict": "inconclusive"}},
        gates={"same": [check("inconclusive"), check("pass")],
               "worse": [check("inconclusive"), check("fail")], "good": [check("pass")]})))
    assert quality_verdicts(tmp_path) == {"fp32": "reference", "same": "inconclusive",
                                          "worse": "fail", "good": "pass",
                                          "free": "ungated", "noisy": "inconclusive"}
    row = DecisionRow("same", "inconclusive", "ok",
                      plan_variant("same", {"query": Knee("query", 32.0, "requests/s")},
                                   Demand(target_qps=50), 0.1))
    assert row.sentence().startswith("same: quality inconclusive, ")
    assert recommend([row]) is None  # only a certified pass (or the reference) is recommended
    free = DecisionRow("free", "ungated", "ok", row.plan)
    assert free.sentence().startswith("free: quality ungated")
    assert recommend([free]) is None


def test_a_damaged_run_summary_is_bad_input_naming_it(tmp_path) -> None:
    """The decision table reads the run's summary.json with the typed model: a file that
    is not JSON, or a verdict of the wrong type, is exit 2 naming the file, not a guess."""
    import json

    from evalq.core.errors import InputError
    from evalq.results.load import quality_verdicts

    path = tmp_path / "summary.json"
    path.write_text('{"variants": ')
    with pytest.raises(InputError) as caught:
        quality_verdicts(tmp_path)
    assert caught.value.file == path and "not valid JSON" in caught.value.message
    data = summary({"fp32": {"role": "reference"},
                    "q": {"role": "candidate", "passed": True, "verdict": "pass"}})
    data["variants"]["q"]["verdict"] = "probably"
    path.write_text(json.dumps(data))
    with pytest.raises(InputError) as caught:
        quality_verdicts(tmp_path)
    assert caught.value.file == path and "verdict" in (caught.value.field or "")
