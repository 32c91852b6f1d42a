"""What a load test may allocate, worked out from the recipe before anything is allocated.

A load schedule is numbers a user typed: a rate of 10^9 requests/s over a 2 s warm-up is
two billion send times, and drawing them grew ``evalq load`` past 18 GB before the
kernel stepped in. So every number that becomes an allocation is bounded here, in one
place, at recipe time:

- each **step** schedules at most :data:`MAX_STEP_REQUESTS` requests: the warm-up ones
  (``rate × warmup_s``, all sent, none measured) plus the measured ones
  (``min(rate × duration_s, max_requests)``);
- at most :data:`MAX_IN_FLIGHT` requests are in flight (``max_in_flight``, and each
  closed-loop ``concurrency``, which is that many clients);
- the prepared request bodies hold at most :data:`MAX_POOL_TEXTS` texts per series
  (the sweep cycles through them; a larger pool would repeat nothing new);
- times are finite and below a day (warm-up and timeouts below an hour).

:func:`load_budget` reports the figures (requests, schedule size, a memory estimate)
that ``evalq plan`` prints; :func:`check_schedule` refuses a recipe over the bounds,
naming the field. The memory estimate is an upper bound of what the schedule itself
costs (send times with the draw's temporaries, in-flight request state and the request
pool), not of the server's answers.

This module imports nothing of evalq, so the recipe schema can use it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

MAX_STEP_REQUESTS = 1_000_000
MAX_REQUESTS = MAX_STEP_REQUESTS  # load.max_requests
MAX_IN_FLIGHT = 10_000
MAX_POOL_TEXTS = 50_000
MAX_RERANK_DEPTH = 10_000
MAX_WARMUP_S = 3_600.0
MAX_DURATION_S = 86_400.0
MAX_TIMEOUT_S = 3_600.0

# Per scheduled send time: the float64 time, its exponential gap and the cumulative-sum
# temporary while it is drawn (numpy), plus slack for the chunked draw.
BYTES_PER_ARRIVAL = 32
# Per request in flight: an asyncio task, its coroutine frame and httpx's connection and
# buffers (measured at about 20 KB against a local server; rounded up).
BYTES_PER_IN_FLIGHT = 64 * 1024
# Per prepared text in the request pool: its JSON body and the Python objects around it,
# for passages of a few hundred words.
BYTES_PER_TEXT = 2 * 1024


@dataclass(frozen=True)
class StepBudget:
    """One step of one workload: what it schedules and holds at once."""

    workload: str
    level: float
    warmup_requests: int
    measured_requests: int
    in_flight: int

    @property
    def scheduled(self) -> int:
        return self.warmup_requests + self.measured_requests


@dataclass(frozen=True)
class LoadBudget:
    """The whole load test: steps, requests and the schedule's peak memory estimate."""

    steps: tuple[StepBudget, ...]
    pool_texts: int

    @property
    def requests(self) -> int:
        return sum(s.scheduled for s in self.steps)

    @property
    def largest_step(self) -> int:
        return max((s.scheduled for s in self.steps), default=0)

    @property
    def memory_bytes(self) -> int:
        """Steps run one at a time: the largest one, plus the pool of prepared bodies."""
        step = max((s.scheduled * BYTES_PER_ARRIVAL + s.in_flight * BYTES_PER_IN_FLIGHT
                    for s in self.steps), default=0)
        return step + self.pool_texts * BYTES_PER_TEXT

    def describe(self) -> str:
        mib = self.memory_bytes / 2**20
        return (f"load budget: {len(self.steps)} step(s), at most {self.requests:,} requests "
                f"(largest step {self.largest_step:,} scheduled, limit "
                f"{MAX_STEP_REQUESTS:,}), request pool <= {self.pool_texts:,} texts per "
                f"series, schedule memory <= {mib:,.0f} MiB")


def _ceil(value: float) -> int:
    return math.ceil(value) if math.isfinite(value) else MAX_STEP_REQUESTS * 10


def step_budgets(section: Any) -> list[StepBudget]:
    """Every step ``section`` (a :class:`evalq.plan.load.LoadSection`) will run; ingest
    batch sizes each repeat the levels."""
    steps = []
    for w in section.workloads:
        series = len(w.batch_sizes or []) or 1
        for _ in range(series):
            for level in w.levels:
                if w.mode == "open":
                    warm = _ceil(level * section.warmup_s)
                    measured = min(_ceil(level * section.duration_s), section.max_requests)
                    in_flight = section.max_in_flight
                else:
                    warm, measured, in_flight = 0, section.max_requests, int(level)
                steps.append(StepBudget(w.name, level, warm, measured, in_flight))
    return steps


def pool_texts(section: Any) -> int:
    """The most texts one series' prepared requests hold (the pool is capped at that)."""
    return MAX_POOL_TEXTS if section.workloads else 0


def load_budget(section: Any) -> LoadBudget:
    return LoadBudget(tuple(step_budgets(section)), pool_texts(section))


def check_schedule(section: Any) -> None:
    """Refuse a step that would schedule more than :data:`MAX_STEP_REQUESTS` requests;
    the message names the workload, the rate and the fields that multiply to it."""
    for step in step_budgets(section):
        if step.scheduled > MAX_STEP_REQUESTS:
            raise ValueError(
                f"workload '{step.workload}' at rate {step.level:g} requests/s schedules "
                f"{step.scheduled:,} requests in one step (warm-up rate × warmup_s = "
                f"{step.warmup_requests:,}, measured min(rate × duration_s, max_requests) = "
                f"{step.measured_requests:,}); a step may schedule at most "
                f"{MAX_STEP_REQUESTS:,}. Lower load.warmup_s or the rate so that "
                f"rate × warmup_s + max_requests <= {MAX_STEP_REQUESTS:,}")
