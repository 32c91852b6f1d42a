"""Quality under load (`evalq.execute.load.quality`): probe texts with known idle vectors
ride along with every step; a server whose answers degrade under concurrency is caught
and the knee stops below the level where quality fails; a healthy one holds everywhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalq.app.cli import main
from evalq.execute.load.generator import RequestSpec, count_items
from evalq.execute.load.quality import (
    ProbeRun,
    QualityFloor,
    choose_probes,
    cosine_floor,
    judge_quality,
    step_quality,
)
from evalq.plan.load import LoadQuality
from evalq.results.load import LoadFolder
from support import recipes
from support.load_test_server import Behaviour, LoadTestServer

HERE = Path(__file__).resolve().parents[1]  # tests/
FAST = {"warmup_s": 0.2, "duration_s": 0.6, "max_requests": 200, "timeout_s": 3,
        "parity": False}


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(HERE.parent)  # datasets/ manifests are found from the repo root


def _load(tmp_path: Path, recipe: Path) -> int:
    return main(["load", str(recipe), "-o", str(tmp_path / "out")])


def _summary(tmp_path: Path) -> dict[str, Any]:
    return LoadFolder(tmp_path / "out").read_summary()


def _unit_rows(a: np.ndarray) -> np.ndarray:
    return a / np.linalg.norm(a, axis=1, keepdims=True)


def _run(share: float = 0.5, min_overlap: float | None = None) -> ProbeRun:
    rng = np.random.default_rng(3)
    return ProbeRun(["q0", "q1"], [1, 1], ["d0", "d1", "d2", "d3"], [1, 1, 1, 1],
                    _unit_rows(rng.standard_normal((2, 8))),
                    _unit_rows(rng.standard_normal((4, 8))),
                    lambda texts, tokens: RequestSpec("/v1/embeddings", b"{}", len(texts),
                                                      tokens, expect=len(texts)),
                    LoadQuality(share=share, top_k=2), QualityFloor(0.99, min_overlap, "test"))


def test_default_floor_comes_from_the_declared_tolerance_else_parity() -> None:
    floor, source = cosine_floor(1e-6, 0.9999)
    assert floor == pytest.approx(1 - 1e-6) and "tolerance" in source
    # bit-identical (0) still leaves room for float64 rounding of equal vectors
    assert cosine_floor(0.0, 0.9999)[0] == pytest.approx(1 - 1e-9)
    floor, source = cosine_floor(None, 0.9999)
    assert floor == 0.9999 and "parity.min_cosine" in source


def test_probes_are_fixed_by_the_seed_and_interleaved_every_stride() -> None:
    assert choose_probes(3, 20, 40, seed=7) == choose_probes(3, 20, 40, seed=7)
    assert choose_probes(3, 20, 40, seed=7) != choose_probes(3, 20, 40, seed=8)
    assert choose_probes(50, 2, 4, seed=0) == ([0, 1], [0, 1, 2, 3])
    run = _run(share=0.5)
    plain = [RequestSpec("/v1/embeddings", b"x", 1, 1, expect=1) for _ in range(6)]
    mixed = run.interleave("query", plain)
    assert [s.probe for s in mixed] == [None, (("q", 0),), None, (("q", 1),), None,
                                        (("q", 0),)]
    batches = [RequestSpec("/v1/embeddings", b"x", 3, 3, expect=3)]
    docs = [s.probe for s in run.interleave("ingest", batches) if s.probe]
    assert docs[0] == (("d", 0), ("d", 1), ("d", 2)) and all(len(p) == 3 for p in docs)
    assert run.interleave("rerank", plain) == plain


def _answer(vectors: list[np.ndarray]) -> bytes:
    return json.dumps({"data": [{"index": i, "embedding": v.tolist()}
                                for i, v in enumerate(vectors)]}).encode()


def test_step_quality_compares_answers_with_idle_and_judges_them() -> None:
    run = _run(min_overlap=1.0)
    collector = run.collector()
    check = collector.validator(count_items)
    q0 = RequestSpec("/v1/embeddings", b"", 1, 1, expect=1, probe=(("q", 0),))
    assert check(_answer([run.query_vectors[0] * 3.0]), q0) is None  # scale does not matter
    quality = step_quality(run, collector)
    assert quality["probes"] == 1 and quality["cosine_min"] == pytest.approx(1.0)
    assert quality["overlap_min"] == 1.0
    assert judge_quality("pass", [], quality, run.floor) == ("pass", [])
    # a degraded answer: the cosine falls and the ranking of the probe documents moves
    assert check(_answer([-run.query_vectors[0]]), q0) is None
    quality = step_quality(run, collector)
    assert quality["cosine_min"] == pytest.approx(-1.0)
    assert quality["overlap_min"] < 1.0
    verdict, reasons = judge_quality("pass", ["keep"], quality, run.floor)
    assert verdict == "quality" and reasons[0] == "keep"
    assert "probe cosine min" in reasons[1] and "overlap" in reasons[2]
    # another check's verdict stays; a step without probe answers is not judged
    assert judge_quality("slo", [], quality, run.floor)[0] == "slo"
    empty = step_quality(run, run.collector())
    assert empty["probes"] == 0 and judge_quality("pass", [], empty, run.floor) == ("pass", [])
    # an answer of the wrong width is a bad answer, not a quality figure
    assert check(_answer([np.ones(3)]), q0) == "bad_response"


def _quality_recipe(tmp_path: Path, url: str, workloads: list[dict[str, Any]],
                    quality: dict[str, Any]) -> Path:
    recipe = recipes.recipe(
        "load-test", datasets=["pydocs"], queries=20, docs=40,
        reference={"name": "fp32", "backend": "inprocess"},
        candidates=[{"name": "srv", "backend": "openai", "http": {"url": url, "model": "test"}}],
        load={**FAST, "workloads": workloads, "quality": quality})
    return recipes.write(tmp_path / "recipe.yaml", {**recipe, "capacity": {"target_qps": 5}})


def test_a_server_that_degrades_under_concurrency_is_caught(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    behaviour = Behaviour(delay_ms=20, text_vectors=True, dim=16, noise_above=2, noise=1.0)
    with LoadTestServer(behaviour) as server:
        recipe = _quality_recipe(tmp_path, server.url, [
            {"name": "query", "kind": "query", "slo_p99_ms": 5000,
             "closed_loop": {"concurrency": [1, 4]}}], {"share": 0.25, "min_cosine": 0.99})
        assert _load(tmp_path, recipe) == 0  # a knee was found: below the quality break
        assert server.counters.noisy > 0
    v = _summary(tmp_path)["variants"]["srv"]
    assert v["quality"]["enabled"] and v["quality"]["min_cosine"] == 0.99
    steps = v["workloads"]["query"]["steps"]
    assert [s["verdict"] for s in steps] == ["pass", "quality"]
    assert steps[0]["quality"]["probes"] > 0
    assert steps[0]["quality"]["cosine_min"] == pytest.approx(1.0, abs=1e-9)
    assert steps[1]["quality"]["cosine_min"] < 0.99
    assert steps[1]["latency_ms"]["p99"] < 5000  # latency held: quality alone broke it
    knee = v["workloads"]["query"]["knee"]
    assert knee["level"] == 1.0 and knee["lower_bound"] is False
    assert knee["stopped_by"].startswith("quality at level 4: probe cosine min")
    out = capsys.readouterr().out
    assert "min cos" in out and "knee stopped by quality at level 4" in out


def test_quality_broken_at_the_first_level_leaves_no_knee_and_exits_1(tmp_path: Path) -> None:
    behaviour = Behaviour(delay_ms=20, text_vectors=True, dim=16, noise_above=2, noise=1.0)
    with LoadTestServer(behaviour) as server:
        recipe = _quality_recipe(tmp_path, server.url, [
            {"name": "query", "kind": "query", "slo_p99_ms": 5000,
             "closed_loop": {"concurrency": [4]}}], {"share": 0.25, "min_cosine": 0.99})
        assert _load(tmp_path, recipe) == 1
    s = _summary(tmp_path)
    knee = s["variants"]["srv"]["workloads"]["query"]["knee"]
    assert knee["per_s"] is None
    assert knee["reason"].startswith("quality under load broke at the first step")
    assert s["decision"][0]["feasible"] is False
    assert any("quality under load" in b for b in s["broken"])


def test_a_healthy_server_holds_quality_at_every_level(tmp_path: Path) -> None:
    with LoadTestServer(Behaviour(delay_ms=2, text_vectors=True, dim=16)) as server:
        recipe = _quality_recipe(tmp_path, server.url, [
            {"name": "query", "kind": "query", "slo_p99_ms": 5000,
             "open_loop": {"rates": [20, 40]}},
            {"name": "ingest", "kind": "ingest", "slo_p99_ms": 5000, "batch_sizes": [3],
             "closed_loop": {"concurrency": [1, 2]}}], {"share": 0.25, "min_overlap": 1.0})
        assert _load(tmp_path, recipe) == 0
    v = _summary(tmp_path)["variants"]["srv"]
    # an openai server declares no batch-composition tolerance: the parity floor
    assert v["quality"]["min_cosine"] == 0.9999
    assert "parity.min_cosine" in v["quality"]["floor_source"]
    for workload in v["workloads"].values():
        assert "stopped_by" not in workload["knee"] and workload["knee"]["lower_bound"]
        for step in workload["steps"]:
            assert step["verdict"] == "pass"
            assert step["quality"]["probes"] > 0
            assert step["quality"]["cosine_min"] == pytest.approx(1.0, abs=1e-9)
            assert step["quality"]["overlap_min"] == 1.0


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.vllm
@pytest.mark.process
@pytest.mark.server
def test_a_real_vllm_server_keeps_its_declared_tolerance_under_load(tmp_path: Path) -> None:
    """vLLM fp32 declares near-invariance to batch composition (tolerance 1e-6): its
    answers under concurrent load must stay within ``1 - 1e-6`` of its idle answers."""
    recipe = recipes.recipe(
        "load-vllm", datasets=["pydocs"], queries=20, docs=40,
        reference={"name": "fp32", "backend": "inprocess"},
        candidates=[{"name": "vllm-fp32", "backend": "vllm", "dtype": "float32",
                     "vllm": {"mode": "server", "gpu_memory_utilization": 0.1}}],
        load={**FAST, "warmup_s": 0.3, "duration_s": 1.0, "timeout_s": 30,
              "quality": {"share": 0.25},
              "workloads": [{"name": "query", "kind": "query", "slo_p99_ms": 30000,
                             "closed_loop": {"concurrency": [1, 4]}},
                            {"name": "ingest", "kind": "ingest", "slo_p99_ms": 30000,
                             "batch_sizes": [8], "closed_loop": {"concurrency": [2]}}]})
    path = recipes.write(tmp_path / "recipe.yaml", recipe)
    assert _load(tmp_path, path) == 0
    v = _summary(tmp_path)["variants"]["vllm-fp32"]
    assert v["quality"]["min_cosine"] == pytest.approx(1 - 1e-6)
    assert "tolerance" in v["quality"]["floor_source"]
    for workload in v["workloads"].values():
        for step in workload["steps"]:
            assert step["verdict"] == "pass", step["reasons"]
            assert step["quality"]["probes"] > 0
            assert step["quality"]["overlap_min"] == 1.0
