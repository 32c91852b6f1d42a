"""Capacity is never planned from failed traffic: a step whose requests timed out or
failed is a failed step, a knee and a plan need successful requests, and `evalq load`
exits 1 (the SLO was not met) with the decision table saying why. An ingest batch larger
than the corpus is labelled with the batch actually sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalq.app.cli import main
from evalq.execute.load.capacity import NEEDS_ANSWERS, Demand, Knee, plan_variant
from evalq.execute.load.sweep import Endpoint, TextPool, build_series, judge_step
from evalq.plan.load import Workload
from evalq.results.load import LoadFolder
from support import recipes
from support.load_test_server import Behaviour, LoadTestServer

HERE = Path(__file__).resolve().parents[1]  # tests/


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(HERE.parent)


def _figures(ok: int, sent: int, timeouts: int, p99: float | None) -> dict[str, Any]:
    return {"ok": ok, "sent": sent, "errors": {"timeout": timeouts} if timeouts else {},
            "error_rate": 0.0, "timeout_rate": timeouts / sent if sent else 0.0,
            "latency_ms": {"p99": p99}}


QUERY = Workload(name="q", kind="query", slo_p99_ms=2000, open_loop={"rates": [5]})


def test_a_step_of_timeouts_under_the_slo_is_failed_not_passed() -> None:
    verdict, reasons = judge_step(_figures(0, 10, 10, 300.0), QUERY, error_budget=0.01)
    assert verdict == "failed" and "no successful request" in reasons[0]
    verdict, reasons = judge_step(_figures(8, 10, 2, 300.0), QUERY, error_budget=0.01)
    assert verdict == "failed" and "error budget" in reasons[0]
    # within the budget, a step with answers still passes, as before
    assert judge_step(_figures(99, 100, 1, 300.0), QUERY, error_budget=0.05)[0] == "pass"


def test_no_knee_from_failed_traffic_plans_nothing() -> None:
    plan = plan_variant("srv", {"query": Knee("query", None, "requests/s",
                                              reason=f"requests failed: {NEEDS_ANSWERS}")},
                        Demand(target_qps=10), 1.0)
    assert not plan.feasible and plan.replicas is None
    assert plan.notes[-1].endswith(NEEDS_ANSWERS)


def test_every_request_timing_out_is_exit_1_with_no_knee_and_no_plan(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with LoadTestServer(Behaviour(delay_ms=1500)) as server:
        recipe = recipes.write(tmp_path / "recipe.yaml", {**recipes.recipe(
            "load-test", datasets=["pydocs"], queries=20, docs=40,
            reference={"name": "fp32", "backend": "inprocess"},
            candidates=[{"name": "srv", "backend": "openai",
                         "http": {"url": server.url, "model": "test"}}],
            load={"warmup_s": 0.1, "duration_s": 0.5, "max_requests": 50, "timeout_s": 0.3,
                  "parity": False, "workloads": [
                      {"name": "query", "kind": "query", "slo_p99_ms": 2000,
                       "open_loop": {"rates": [10, 20]}}]}),
            "capacity": {"target_qps": 10, "dollars_per_replica_hour": 1.0}})
        code = main(["load", str(recipe), "-o", str(tmp_path / "out")])
    out = capsys.readouterr()
    assert code == 1
    s = LoadFolder(tmp_path / "out").read_summary()
    w = s["variants"]["srv"]["workloads"]["query"]
    assert [st["verdict"] for st in w["steps"]] == ["failed"]
    assert w["steps"][0]["ok"] == 0
    assert w["knee"]["per_s"] is None and NEEDS_ANSWERS in w["knee"]["reason"]
    row = s["decision"][0]
    assert row["feasible"] is False and row["replicas"] is None
    assert NEEDS_ANSWERS in row["sentence"] and NEEDS_ANSWERS in out.out
    assert s["recommendation"] is None
    assert any(NEEDS_ANSWERS in b for b in s["broken"])
    json.dumps(s)


def test_an_ingest_batch_larger_than_the_corpus_is_labelled_as_sent() -> None:
    docs = [f"doc {i}" for i in range(8)]
    pool = TextPool(["q"], [1], docs, [2] * 8)
    ingest = Workload(name="i", kind="ingest", slo_p99_ms=100, batch_sizes=[4, 100000, 50],
                      closed_loop={"concurrency": [1]})
    series = build_series(Endpoint("srv", "http://127.0.0.1:1", "openai"), ingest, pool)
    assert [label for label, _ in series] == ["batch=4", "batch=8"]
    sent = series[1][1]
    assert all(r.texts == 8 and r.tokens == 16 for r in sent)
    assert all(len(json.loads(r.body)["input"]) == 8 for r in sent)
    assert [r.texts for r in series[0][1]] == [4, 4]  # a batch that fits: as before
