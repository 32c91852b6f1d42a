"""Fault cases of the load-test schedule: numbers that would become allocations are refused
at their recipe line (exit 2, file, field) before anything is allocated, and the worst
schedule the bounds allow stays inside the memory budget ``evalq plan`` prints."""

from __future__ import annotations

import json
import math
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evalq.app.cli import main
from evalq.plan.load import LoadSection
from evalq.plan.loadbudget import (
    BYTES_PER_ARRIVAL,
    BYTES_PER_TEXT,
    MAX_IN_FLIGHT,
    MAX_STEP_REQUESTS,
    load_budget,
)
from support import recipes

ROOT = Path(__file__).resolve().parents[2]
QUERY = {"name": "q", "kind": "query", "slo_p99_ms": 100, "open_loop": {"rates": [5]}}
NAN, INF = math.nan, math.inf


def _recipe(tmp_path: Path, load: dict[str, Any]) -> Path:
    recipe = recipes.recipe(
        "load-faults", datasets=["pydocs"], queries=20, docs=40,
        reference={"name": "fp32", "backend": "inprocess"},
        candidates=[{"name": "srv", "backend": "openai",
                     "http": {"url": "http://127.0.0.1:9", "model": "test"}}],
        load={"parity": False, "workloads": [QUERY], **load})
    return recipes.write(tmp_path / "recipe.yaml", recipe)


def _workload(**changes: Any) -> dict[str, Any]:
    return {"workloads": [{**QUERY, **changes}]}


HOSTILE = [
    (_workload(open_loop={"rates": [NAN]}), "load.workloads.0.open_loop.rates.0"),
    (_workload(open_loop={"rates": [INF]}), "load.workloads.0.open_loop.rates.0"),
    (_workload(open_loop={"rates": [0]}), "load.workloads.0.open_loop.rates.0"),
    (_workload(open_loop={"rates": [-3]}), "load.workloads.0.open_loop.rates.0"),
    (_workload(open_loop=None, closed_loop={"concurrency": [0]}),
     "load.workloads.0.closed_loop.concurrency.0"),
    (_workload(open_loop=None, closed_loop={"concurrency": [10**9]}),
     "load.workloads.0.closed_loop.concurrency.0"),
    (_workload(slo_p99_ms=NAN), "load.workloads.0.slo_p99_ms"),
    (_workload(slo_p99_ms=-1), "load.workloads.0.slo_p99_ms"),
    ({"warmup_s": NAN}, "load.warmup_s"),
    ({"quality": {"share": 0}}, "load.quality.share"),
    ({"quality": {"share": NAN}}, "load.quality.share"),
    ({"quality": {"probes": -1}}, "load.quality.probes"),
    ({"quality": {"min_cosine": 2}}, "load.quality.min_cosine"),
    ({"quality": {"min_overlap": INF}}, "load.quality.min_overlap"),
    ({"warmup_s": -1}, "load.warmup_s"),
    ({"warmup_s": 1e9}, "load.warmup_s"),
    ({"duration_s": 0}, "load.duration_s"),
    ({"duration_s": INF}, "load.duration_s"),
    ({"duration_s": 1e12}, "load.duration_s"),
    ({"timeout_s": NAN}, "load.timeout_s"),
    ({"timeout_s": 0}, "load.timeout_s"),
    ({"max_requests": 0}, "load.max_requests"),
    ({"max_requests": 10**12}, "load.max_requests"),
    ({"max_in_flight": 0}, "load.max_in_flight"),
    ({"max_in_flight": 10**9}, "load.max_in_flight"),
    ({"error_budget": NAN}, "load.error_budget"),
    ({"workloads": [{"name": "i", "kind": "ingest", "slo_p99_ms": 9, "batch_sizes": [0],
                     "closed_loop": {"concurrency": [1]}}]}, "load.workloads.0.batch_sizes.0"),
    ({"workloads": [{"name": "r", "kind": "rerank", "slo_p99_ms": 9, "depth": 10**9,
                     "endpoint": "/rerank", "open_loop": {"rates": [1]}}]},
     "load.workloads.0.depth"),
    # the two: 10^9 requests/s over the default 2 s warm-up, and a huge warm-up
    (_workload(open_loop={"rates": [1e9]}), "rate × warmup_s"),
    ({"warmup_s": 3000, **_workload(open_loop={"rates": [1000]})}, "rate × warmup_s"),
]


@pytest.mark.parametrize(("load", "needle"), HOSTILE)
@pytest.mark.parametrize("command", ["validate", "load", "plan"])
def test_absurd_schedules_are_refused_at_their_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        load: dict[str, Any], needle: str, command: str) -> None:
    monkeypatch.chdir(ROOT)
    recipe = _recipe(tmp_path, load)
    argv = [command, str(recipe)] + (["-o", str(tmp_path / "out")] if command == "load" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{recipe}:" in err and needle in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_plan_prints_the_load_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    recipe = _recipe(tmp_path, {"warmup_s": 1, "duration_s": 2, "max_requests": 50,
                                **_workload(open_loop={"rates": [10, 100]})})
    assert main(["plan", str(recipe)]) == 0
    out = capsys.readouterr().out
    # 10/s: 10 warm-up + 20 measured; 100/s: 100 warm-up + 50 (max_requests) measured
    assert "load budget: 2 step(s), at most 180 requests (largest step 150" in out, out
    assert "schedule memory <=" in out


# The worst schedule the bounds allow: a step of MAX_STEP_REQUESTS send times at a huge
# rate, MAX_IN_FLIGHT in flight. The child draws it and reports its peak RSS growth.
WORST = {"warmup_s": 0, "duration_s": 1, "max_requests": MAX_STEP_REQUESTS,
         "max_in_flight": MAX_IN_FLIGHT,
         "workloads": [{**QUERY, "open_loop": {"rates": [1e12]}}]}

# The child's own peak resident set (kB). Not ru_maxrss: Linux keeps that across exec, so
# a child forked from a large pytest process (models loaded) would report the parent's
# size; VmHWM belongs to the address space exec makes new.
PEAK = "int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))"

CHILD = """
import json, re, resource, sys
from evalq.execute.load.generator import StepBounds, poisson_arrivals
from evalq.execute.load.sweep import Endpoint, TextPool, build_series
from evalq.plan.load import LoadSection
section = LoadSection.model_validate(json.loads(sys.argv[1]))
texts = ["a passage of a few words " * 8] * 200_000
pool = TextPool(texts, [40] * len(texts), texts, [40] * len(texts))
before = """ + PEAK + """
bounds = StepBounds(section.warmup_s, section.duration_s, section.max_requests,
                    section.timeout_s, section.max_in_flight)
times, warm = poisson_arrivals(section.workloads[0].levels[0], bounds, 0)
series = build_series(Endpoint("v", "http://127.0.0.1:9", "openai"), section.workloads[0], pool)
after = """ + PEAK + """
print(json.dumps({"grew_kib": after - before, "sent": len(times), "warm": warm,
                  "pool": sum(len(r) for _, r in series)}))
"""


def _child(code: str, *args: str, cwd: Path | None = None,
           limit_bytes: int = 8 << 30) -> subprocess.CompletedProcess[str]:
    """A child Python with its address space capped: a schedule that is not bounded fails
    in the child with MemoryError instead of taking the machine (as it did before)."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          preexec_fn=cap, timeout=300, check=False, cwd=cwd)


def test_worst_allowed_schedule_stays_within_the_stated_memory_budget() -> None:
    budget = load_budget(LoadSection.model_validate(WORST))
    done = _child(CHILD, json.dumps(WORST))
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert figures["sent"] == MAX_STEP_REQUESTS and figures["warm"] == 0
    assert figures["pool"] <= 50_000  # the request pool is capped, not the whole corpus
    grew = figures["grew_kib"] * 1024
    assert grew <= budget.memory_bytes, (grew, budget.memory_bytes)
    # nothing was in flight here: the drawn parts alone stay within their share
    drawn = MAX_STEP_REQUESTS * BYTES_PER_ARRIVAL + figures["pool"] * BYTES_PER_TEXT
    assert grew <= drawn, (grew, drawn)


def test_refused_schedule_never_allocates(tmp_path: Path) -> None:
    """`evalq load` on the issue's recipe (10^9 requests/s, warmup_s 10^9): exit 2 with
    the child's peak RSS that of a Python that imported evalq, not of the schedule."""
    recipe = _recipe(tmp_path, {"warmup_s": 1e9, **_workload(open_loop={"rates": [1e9]})})
    code = ("import re, sys\nfrom evalq.app.cli import main\n"
            f"rc = main(['load', {str(recipe)!r}, '-o', {str(tmp_path / 'out')!r}])\n"
            f"print('peak_kib', {PEAK})\n"
            "sys.exit(rc)\n")
    done = _child(code, cwd=ROOT)
    assert done.returncode == 2, done.stderr
    assert "load.warmup_s" in done.stderr
    peak_kib = int(done.stdout.split("peak_kib")[1])
    assert peak_kib < 1 << 20, peak_kib  # under 1 GiB: nothing was scheduled
