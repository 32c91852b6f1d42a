"""The load generator against a local aiohttp server with injected latency and errors.

Each assertion compares what the generator measured with what the server was told to do
and counted; timing assertions are one-sided (an injected delay is a lower bound on the
latency measured), so a slow shared machine cannot make them fail.
"""

from __future__ import annotations

import asyncio
import json

from evalq.execute.load.generator import LoadGenerator, RequestSpec, StepBounds, poisson_arrivals
from evalq.execute.load.sweep import judge_step
from evalq.plan.load import Workload
from support.load_test_server import Behaviour, LoadTestServer


def _requests(n: int = 20, texts: int = 1) -> list[RequestSpec]:
    return [RequestSpec("/v1/embeddings",
                        json.dumps({"model": "test", "input": [f"t{i}"] * texts}).encode(),
                        texts=texts, tokens=5 * texts, expect=texts) for i in range(n)]


def _bounds(**kw: float) -> StepBounds:
    base = {"warmup_s": 0.0, "duration_s": 1.0, "max_requests": 2000, "timeout_s": 30.0,
            "max_in_flight": 512}
    return StepBounds(**{**base, **kw})  # type: ignore[arg-type]


def test_open_loop_counts_every_request_and_injected_tail_sets_p99() -> None:
    # every 10th request is 1 s slower: p99 must show it, p50 must not
    with LoadTestServer(Behaviour(delay_ms=2, slow_every=10, slow_ms=1000)) as server:
        gen = LoadGenerator(server.url, _bounds(duration_s=2.0))
        m = asyncio.run(gen.open_loop(_requests(), rate=50, seed=1))
        served = server.counters.requests
    arrivals, _ = poisson_arrivals(50, _bounds(duration_s=2.0), 1)
    assert m.sent == len(arrivals) == served  # no sample dropped, nothing extra sent
    assert m.ok == m.sent and not m.errors
    assert m.latency.count == m.sent
    assert m.latency.quantile_ms(0.99) >= 1000  # the injected tail
    assert m.latency.quantile_ms(0.5) < 1000
    assert m.latency.quantile_ms(1.0) >= 1000
    assert m.texts == m.sent and m.tokens == 5 * m.sent


def test_open_loop_keeps_sending_while_the_server_is_slow() -> None:
    # 300 ms per answer at 40 req/s: an open-loop generator has ~12 requests in flight;
    # one that waited for answers would never have more than one.
    with LoadTestServer(Behaviour(delay_ms=300)) as server:
        gen = LoadGenerator(server.url, _bounds(duration_s=1.0))
        m = asyncio.run(gen.open_loop(_requests(), rate=40, seed=2))
        assert server.counters.max_in_flight >= 5
    assert m.ok == m.sent
    assert m.latency.quantile_ms(0.5) >= 300


def test_injected_errors_are_counted_by_kind_and_break_the_error_budget() -> None:
    with LoadTestServer(Behaviour(fail_every=5)) as server:
        gen = LoadGenerator(server.url, _bounds(duration_s=1.0))
        m = asyncio.run(gen.open_loop(_requests(), rate=60, seed=3))
        failed = server.counters.failed
    assert failed > 0
    assert m.errors["http_5xx"] == failed
    assert m.ok + failed == m.sent
    assert m.latency.count == m.ok  # failed requests have no latency sample
    figures = m.as_dict()
    assert abs(figures["error_rate"] - failed / m.sent) < 1e-12
    w = Workload(name="q", kind="query", slo_p99_ms=10_000, open_loop={"rates": [60]})
    verdict, reasons = judge_step(figures, w, error_budget=0.05)
    assert verdict == "errors" and "error budget" in reasons[0]
    assert judge_step(figures, w, error_budget=0.5)[0] == "pass"


def test_timeouts_are_counted_and_recorded_at_least_at_the_timeout() -> None:
    with LoadTestServer(Behaviour(delay_ms=2000)) as server:
        gen = LoadGenerator(server.url, _bounds(duration_s=0.5, timeout_s=0.3))
        m = asyncio.run(gen.open_loop(_requests(), rate=20, seed=4))
        assert server.counters.requests == m.sent
    assert m.errors["timeout"] == m.sent and m.ok == 0
    assert m.latency.count == m.sent
    assert m.latency.quantile_ms(0.5) >= 300
    figures = m.as_dict()
    assert figures["error_rate"] == 0.0 and figures["timeout_rate"] == 1.0
    w = Workload(name="q", kind="query", slo_p99_ms=100, open_loop={"rates": [20]})
    assert judge_step(figures, w, error_budget=0.01)[0] == "slo"


def test_bad_answers_are_errors() -> None:
    with LoadTestServer(Behaviour(wrong_count=True)) as server:
        gen = LoadGenerator(server.url, _bounds(duration_s=0.3))
        m = asyncio.run(gen.open_loop(_requests(texts=3), rate=30, seed=5))
    assert m.errors["bad_response"] == m.sent and m.ok == 0


def test_closed_loop_holds_its_concurrency_and_the_count_bound() -> None:
    with LoadTestServer(Behaviour(delay_ms=20)) as server:
        gen = LoadGenerator(server.url, _bounds(duration_s=30.0, max_requests=40))
        m = asyncio.run(gen.closed_loop(_requests(texts=4), concurrency=4))
        assert server.counters.max_in_flight <= 4
        assert m.sent == 40  # stopped by the count bound
        assert server.counters.requests == m.sent + m.warmup_sent
    assert m.warmup_sent >= 4  # every client's first answer is warm-up
    assert m.ok == 40 and m.texts == 160
    assert m.latency.quantile_ms(0.0) >= 20


def test_closed_loop_measures_requests_slower_than_the_warmup() -> None:
    # 400 ms answers, 0.1 s warm-up: measuring starts once every client has one answer
    with LoadTestServer(Behaviour(delay_ms=400)) as server:
        gen = LoadGenerator(server.url, _bounds(warmup_s=0.1, duration_s=0.9))
        m = asyncio.run(gen.closed_loop(_requests(), concurrency=2))
        assert server.counters.requests == m.sent + m.warmup_sent
    assert m.warmup_sent >= 2 and m.sent >= 2 and m.ok == m.sent
    assert m.latency.quantile_ms(0.5) >= 400


def test_warmup_is_sent_but_not_measured() -> None:
    with LoadTestServer() as server:
        gen = LoadGenerator(server.url, _bounds(warmup_s=0.5, duration_s=0.5))
        m = asyncio.run(gen.open_loop(_requests(), rate=40, seed=6))
        assert server.counters.requests == m.sent + m.warmup_sent
    assert m.warmup_sent > 0 and m.latency.count == m.sent


def test_in_flight_cap_marks_the_step_as_measuring_the_generator() -> None:
    with LoadTestServer(Behaviour(delay_ms=500)) as server:
        gen = LoadGenerator(server.url, _bounds(duration_s=0.5, max_in_flight=2))
        m = asyncio.run(gen.open_loop(_requests(), rate=40, seed=7))
        assert server.counters.max_in_flight <= 2
    assert m.errors["client_overload"] > 0
    w = Workload(name="q", kind="query", slo_p99_ms=10_000, open_loop={"rates": [40]})
    assert judge_step(m.as_dict(), w, error_budget=1.0)[0] == "generator"


def test_poisson_arrivals_respect_both_bounds() -> None:
    times, warm = poisson_arrivals(100, _bounds(warmup_s=1.0, duration_s=2.0), 0)
    assert (times < 3.0).all() and (times[:warm] < 1.0).all() and (times[warm:] >= 1.0).all()
    assert 200 < len(times) < 400  # 300 expected
    capped, warm2 = poisson_arrivals(100, _bounds(warmup_s=1.0, duration_s=2.0,
                                                  max_requests=10), 0)
    assert len(capped) - warm2 == 10
