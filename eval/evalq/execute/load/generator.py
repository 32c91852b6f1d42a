"""The load generator: open-loop Poisson arrivals and closed-loop clients (asyncio + httpx).

Two rules keep its numbers honest:

- **Open loop never waits for the server.** Arrival times are drawn up front (seeded
  exponential gaps) and each request is sent at its *absolute* scheduled time as its own
  task; a slow server makes requests pile up in flight, it never delays the next send.
  Latency is measured from the scheduled time, not from when the send happened, so
  generator lag cannot hide queueing (the "coordinated omission" mistake). The lag itself
  is recorded too, to show the generator kept up.
- **Every sample counts.** Latencies go into a :class:`LatencyHistogram`; a request that
  times out is recorded at its timeout (it took at least that long) and counted as a
  timeout; other failures are counted by kind. A request that would exceed
  ``max_in_flight`` is not sent and is counted as ``client_overload``: the step then
  measured the generator, not the server, and is marked so.

Each step is bounded in time (``warmup_s + duration_s`` of arrivals, then at most
``timeout_s`` for the stragglers) and in count (``max_requests`` measured requests);
requests started during ``warmup_s`` are sent but not measured.

The transport is one pair of methods, :meth:`LoadGenerator.open_client` and
:meth:`LoadGenerator.attempt` (HTTP here); the database stage swaps them for searches
(:mod:`evalq.execute.load.dbsearch`) and keeps everything above.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from evalq.execute.load.histogram import LatencyHistogram
from evalq.plan.loadbudget import MAX_STEP_REQUESTS

_CHUNK = 1 << 16  # send times drawn at once


@dataclass(frozen=True)
class RequestSpec:
    """One prepared request: its body is serialized once, before the step starts."""

    path: str
    body: bytes
    texts: int = 1
    tokens: int = 0
    pairs: int = 0
    expect: int | None = None  # items the answer must carry (embeddings, scores)
    # probe texts it carries, one ("q" | "d", probe index) per text (execute.load.quality)
    probe: tuple[tuple[str, int], ...] | None = None
    # what a transport other than HTTP sends (a query's row: execute.load.dbsearch)
    payload: int | None = None


@dataclass(frozen=True)
class StepBounds:
    warmup_s: float = 2.0
    duration_s: float = 10.0
    max_requests: int = 2000
    timeout_s: float = 10.0
    max_in_flight: int = 512


# A validator reads a 2xx body and returns an error kind, or None when it is fine.
Validator = Callable[[bytes, RequestSpec], "str | None"]


def count_items(body: bytes, spec: RequestSpec) -> str | None:
    """The answer carries as many embeddings / scores as the request asked for
    (OpenAI ``data``, vLLM / Infinity rerank ``results``, TEI's bare list)."""
    if spec.expect is None:
        return None
    try:
        parsed = json.loads(body)
    except ValueError:
        return "bad_response"
    items = parsed
    if isinstance(parsed, dict):
        items = parsed.get("data", parsed.get("results"))
    return None if isinstance(items, list) and len(items) == spec.expect else "bad_response"


@dataclass
class StepMeasurement:
    """What one step measured; aggregates only (the histogram keeps every sample)."""

    mode: str  # "open" | "closed"
    level: float  # offered rate (requests/s) or concurrency
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    lag: LatencyHistogram = field(default_factory=LatencyHistogram)  # send - scheduled
    sent: int = 0  # measured requests sent (or dropped by the in-flight cap)
    ok: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    texts: int = 0
    tokens: int = 0
    pairs: int = 0
    window_s: float = 0.0  # from the end of warm-up to the last measured answer
    offered_window_s: float = 0.0  # open loop: the period over which arrivals were offered
    wall_s: float = 0.0
    generator_cpu_s: float = 0.0
    warmup_sent: int = 0
    status_codes: Counter[str] = field(default_factory=Counter)

    @property
    def failed(self) -> int:
        return sum(self.errors.values())

    def rate(self, amount: float) -> float | None:
        return None if self.window_s <= 0 else amount / self.window_s

    def as_dict(self) -> dict[str, Any]:
        server_errors = sum(n for k, n in self.errors.items()
                            if k not in ("timeout", "client_overload"))
        return {
            "mode": self.mode,
            "offered_rps" if self.mode == "open" else "concurrency": self.level,
            "sent": self.sent,
            "ok": self.ok,
            "errors": dict(self.errors),
            "error_rate": server_errors / self.sent if self.sent else 0.0,
            "timeout_rate": self.errors.get("timeout", 0) / self.sent if self.sent else 0.0,
            "achieved_rps": self.rate(self.ok),
            "achieved_vs_offered": (self.rate(self.ok) or 0.0) / self.level
            if self.mode == "open" else None,
            # the Poisson draw's own rate: short steps differ from the nominal one
            "offered_realized_rps": self.sent / self.offered_window_s
            if self.mode == "open" and self.offered_window_s > 0 else None,
            "texts_per_s": self.rate(self.texts),
            "tokens_per_s": self.rate(self.tokens),
            "pairs_per_s": self.rate(self.pairs) if self.pairs else None,
            "latency_ms": self.latency.summary_ms(),
            "latency_error_bound": self.latency.relative_error,
            "generator": {
                "lag_ms": {"p99": self.lag.quantile_ms(0.99), "max": self.lag.quantile_ms(1)},
                "cpu_s": round(self.generator_cpu_s, 4),
                "cpu_share": self.generator_cpu_s / self.wall_s if self.wall_s else None,
            },
            "window_s": self.window_s,
            "wall_s": self.wall_s,
            "warmup_requests": self.warmup_sent,
            "status_codes": dict(self.status_codes),
        }


def poisson_arrivals(rate: float, bounds: StepBounds, seed: int) -> tuple[np.ndarray, int]:
    """Send times (s from step start) for ``warmup_s + duration_s`` at ``rate``, cut once
    ``max_requests`` of them fall after the warm-up; and how many are warm-up.

    Drawn in chunks of at most :data:`_CHUNK` and stopped at the cut, so memory follows
    the schedule the recipe allowed (:mod:`evalq.plan.loadbudget`), never ``rate ×
    horizon``; a schedule over :data:`MAX_STEP_REQUESTS` is refused before any draw."""
    if not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"rate must be a positive finite number of requests/s, got {rate}")
    expected = rate * bounds.warmup_s + min(rate * bounds.duration_s, bounds.max_requests)
    if expected > MAX_STEP_REQUESTS:
        raise ValueError(f"a step at {rate:g} requests/s schedules about {expected:,.0f} "
                         f"requests, over {MAX_STEP_REQUESTS:,}")
    rng = np.random.default_rng(seed)
    horizon = bounds.warmup_s + bounds.duration_s
    chunks: list[np.ndarray] = []
    last, warm, measured = 0.0, 0, 0
    while last < horizon and measured < bounds.max_requests:
        size = min(_CHUNK, int(rate * horizon * 1.2) + 32)
        times = np.cumsum(rng.exponential(1.0 / rate, size=size)) + last
        last = float(times[-1])
        times = times[times < horizon]
        in_warm = int(np.searchsorted(times, bounds.warmup_s))
        warm += in_warm
        keep = in_warm + min(len(times) - in_warm, bounds.max_requests - measured)
        measured += keep - in_warm
        chunks.append(times[:keep])
    return (np.concatenate(chunks) if chunks else np.empty(0)), warm


class LoadGenerator:
    """Drives one base URL; one instance per step (its client lives for the step)."""

    def __init__(self, base_url: str, bounds: StepBounds, *,
                 validate: Validator = count_items, headers: dict[str, str] | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.bounds = bounds
        self.validate = validate
        self.headers = {"content-type": "application/json", **(headers or {})}

    def open_client(self, connections: int) -> Any:
        """An async context manager whose value :meth:`attempt` sends with, good for
        ``connections`` requests at once (here an HTTP client; a subclass may drive
        another transport with the same schedules and histograms)."""
        return httpx.AsyncClient(
            base_url=self.base_url,
            headers=self.headers,
            timeout=httpx.Timeout(self.bounds.timeout_s),
            limits=httpx.Limits(max_connections=connections,
                                max_keepalive_connections=connections),
        )

    async def _send(self, client: Any, spec: RequestSpec, scheduled: float,
                    result: StepMeasurement | None) -> float:
        """One request; records into ``result`` (None = warm-up). Returns its end time."""
        loop = asyncio.get_running_loop()
        started = loop.time()
        kind = await self.attempt(client, spec, result)
        ended = loop.time()
        if result is not None:
            result.lag.record_s(max(0.0, started - scheduled))
            if kind == "timeout":
                result.latency.record_s(max(ended - scheduled, self.bounds.timeout_s))
            elif kind is None:
                result.latency.record_s(ended - scheduled)
            if kind is None:
                result.ok += 1
                result.texts += spec.texts
                result.tokens += spec.tokens
                result.pairs += spec.pairs
            else:
                result.errors[kind] += 1
        return ended

    async def attempt(self, client: Any, spec: RequestSpec,
                      result: StepMeasurement | None) -> str | None:
        """Send ``spec`` once: None when it was answered right, else the error kind
        (``timeout`` is recorded at the timeout). ``result`` (None = warm-up) takes the
        status codes."""
        kind: str | None = None
        try:
            response = await client.post(spec.path, content=spec.body)
            code = response.status_code
            if result is not None:
                result.status_codes[str(code)] += 1
            if code >= 500:
                kind = "http_5xx"
            elif code == 429:
                kind = "http_429"
            elif code >= 400:
                kind = "http_4xx"
            else:
                kind = self.validate(response.content, spec)
        except httpx.TimeoutException:
            kind = "timeout"
        except httpx.ConnectError:
            kind = "connect"
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            kind = "disconnect"
        except httpx.HTTPError:
            kind = "transport"
        return kind

    async def open_loop(self, requests: Sequence[RequestSpec], rate: float,
                        seed: int = 0) -> StepMeasurement:
        """Poisson arrivals at ``rate`` requests/s; see the module docstring."""
        if not requests:
            raise ValueError("no requests to send")
        arrivals, warm = poisson_arrivals(rate, self.bounds, seed)
        result = StepMeasurement(mode="open", level=rate)
        loop = asyncio.get_running_loop()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        ends: list[float] = []
        in_flight: set[asyncio.Task[float]] = set()
        async with self.open_client(self.bounds.max_in_flight) as client:
            start = loop.time() + 0.05
            for i, offset in enumerate(arrivals):
                scheduled = start + float(offset)
                delay = scheduled - loop.time()
                if delay > 0:
                    await asyncio.sleep(delay)
                measured = i >= warm
                if measured:
                    result.sent += 1
                else:
                    result.warmup_sent += 1
                if len(in_flight) >= self.bounds.max_in_flight:
                    if measured:
                        result.errors["client_overload"] += 1
                    continue
                task = asyncio.create_task(self._send(
                    client, requests[i % len(requests)], scheduled, result if measured else None))
                in_flight.add(task)
                task.add_done_callback(in_flight.discard)
                if measured:
                    task.add_done_callback(
                        lambda t: ends.append(t.result())
                        if not t.cancelled() and t.exception() is None else None)
            await self._drain(in_flight, result)
        # The measured window spans the whole offered period (Poisson gaps may leave its
        # end empty) or, when the server fell behind, up to the last measured answer.
        capped = len(arrivals) - warm >= self.bounds.max_requests
        offered_s = (float(arrivals[-1]) if capped and len(arrivals) else
                     self.bounds.warmup_s + self.bounds.duration_s) - self.bounds.warmup_s
        result.offered_window_s = max(offered_s, 0.0)
        warm_end = start + self.bounds.warmup_s
        result.window_s = max(offered_s, (max(ends) - warm_end) if ends else 0.0)
        result.wall_s = time.perf_counter() - wall0
        result.generator_cpu_s = time.process_time() - cpu0
        return result

    async def closed_loop(self, requests: Sequence[RequestSpec],
                          concurrency: int) -> StepMeasurement:
        """``concurrency`` clients in a loop until the step's time or count runs out.

        Warm-up lasts ``warmup_s`` *and* until every client has had one answer (a request
        slower than the warm-up would otherwise leave nothing to measure); the measured
        window then runs ``duration_s``. Requests sent before it are not measured. The step
        is still bounded: warm-up waits at most ``timeout_s`` for the first answers.
        """
        if not requests:
            raise ValueError("no requests to send")
        result = StepMeasurement(mode="closed", level=float(concurrency))
        loop = asyncio.get_running_loop()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        start = loop.time()
        warm_until = start + self.bounds.warmup_s
        give_up_warming = warm_until + self.bounds.timeout_s
        window: list[float] = []  # [measured window start] once it began
        warmed = [False] * concurrency
        counter = iter(range(1 << 62))
        ends: list[float] = []

        def measuring(now: float) -> bool:
            if not window and now >= warm_until and (all(warmed) or now >= give_up_warming):
                window.append(now)
            return bool(window)

        async def client_loop(client: Any, k: int) -> None:
            while True:
                now = loop.time()
                measured = measuring(now)
                if measured and (now >= window[0] + self.bounds.duration_s
                                 or result.sent >= self.bounds.max_requests):
                    return
                i = next(counter)
                if measured:
                    result.sent += 1
                else:
                    result.warmup_sent += 1
                end = await self._send(client, requests[i % len(requests)], now,
                                       result if measured else None)
                warmed[k] = True
                if measured:
                    ends.append(end)

        async with self.open_client(concurrency) as client:
            tasks = {asyncio.create_task(client_loop(client, k)) for k in range(concurrency)}
            await self._drain(tasks, result, extra_s=self.bounds.duration_s
                              + self.bounds.warmup_s + 2 * self.bounds.timeout_s)
        result.window_s = (max(ends) - window[0]) if ends and window else 0.0
        result.wall_s = time.perf_counter() - wall0
        result.generator_cpu_s = time.process_time() - cpu0
        return result

    async def _drain(self, tasks: set[asyncio.Task[Any]], result: StepMeasurement,
                     extra_s: float = 0.0) -> None:
        """Wait for what is in flight, at most ``timeout_s`` (+ ``extra_s``) more; what is
        still pending then is cancelled (httpx's own timeout normally fires first)."""
        if not tasks:
            return
        _done, pending = await asyncio.wait(set(tasks),
                                            timeout=self.bounds.timeout_s + 1.0 + extra_s)
        for task in pending:
            task.cancel()
        for task in pending:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if pending:
            result.errors["timeout"] += len(pending)
