"""``evalq load``'s database stage: concurrent searches of a variant's database index
(``load.databases``), with the load test's own schedules, histograms and verdicts.

Why a stage of its own: a served model's knee says nothing about the database behind
it, and the database's sequential query latency (the run's ``search_s``) says nothing
about it under concurrency. Here the variant's query vectors are encoded first
(:mod:`evalq.execute.load.dbvectors`), so no model is in the loop; each ``query``
workload's levels (concurrency, or rates) then drive searches through the index's
workers (:mod:`evalq.retrieve.workers`): for PostgreSQL one connection per client, for
Qdrant's in-process shard one thread per client (recorded as ``in_process``: the
engine shares evalq's process and its interpreter).

The load generator is :class:`evalq.execute.load.generator.LoadGenerator` itself with
the HTTP request swapped for a search (:class:`SearchGenerator`): the same closed-loop
warm-up, open-loop arrivals, timeouts, error kinds, histograms and step verdicts
(:func:`evalq.execute.load.sweep.judge_step`). Every answer is checked against the
sequential search of the same query: a step records how many answers it checked and
how many differed (as sets of ids; an index searched the same way answers the same).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.errors import InputError
from evalq.execute.load.dbwatch import DatabaseSampler
from evalq.execute.load.generator import LoadGenerator, RequestSpec, StepBounds, StepMeasurement
from evalq.execute.load.sweep import WorkloadOutcome, judge_step, knee_of
from evalq.plan.load import LoadSection, Workload
from evalq.retrieve.serverwatch import ServerWatch
from evalq.retrieve.workers import ConcurrentIndex, SearchWorker, WorkerFailed, WorkerTimeout


class WorkerPool:
    """``size`` threads, each with its own worker made on its first search; answers are
    compared with ``expected`` (per query row, the sequential search's ids)."""

    def __init__(self, index: ConcurrentIndex, size: int, timeout_s: float,
                 vectors: np.ndarray, depth: int, expected: Sequence[frozenset[str]]) -> None:
        self.index, self.size, self.timeout_s = index, size, timeout_s
        self.vectors, self.depth, self.expected = vectors, depth, expected
        self.executor = ThreadPoolExecutor(size, thread_name_prefix="evalq-db")
        self._local = threading.local()
        self._lock = threading.Lock()
        self._workers: list[SearchWorker] = []
        self.checked = self.differs = 0
        self.rows: set[int] = set()
        self.first_error: str | None = None

    def search(self, row: int) -> str | None:
        """One search of query ``row``'s vector, in a pool thread: None when answered,
        else the error kind."""
        return self.search_vector(row, self.vectors[row])

    def search_vector(self, row: int, vector: np.ndarray) -> str | None:
        """One search of ``vector`` (query ``row``, encoded here or by a served model)."""
        worker = getattr(self._local, "worker", None)
        try:
            if worker is None:
                worker = self._local.worker = self.index.worker(self.timeout_s)
                with self._lock:
                    self._workers.append(worker)
            ids = worker.search(vector, self.depth)
        except WorkerTimeout:
            return "timeout"
        except (WorkerFailed, InputError) as exc:  # refused or broken: counted, not raised
            with self._lock:
                self.first_error = self.first_error or f"{type(exc).__name__}: {exc}"[:300]
            return "database_error"
        with self._lock:
            self.checked += 1
            self.differs += frozenset(ids) != self.expected[row]
            self.rows.add(row)
        return None

    async def __aenter__(self) -> WorkerPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.executor.shutdown(wait=True)  # the sessions stay open until close()

    def close(self) -> None:
        """Close the sessions: after the step's server sample, so a backend's CPU is
        still counted (a PostgreSQL backend exits with its connection)."""
        for worker in self._workers:
            worker.close()

    def record(self) -> dict[str, Any]:
        """The step's ``database`` part: its sessions and the answers' check."""
        return {"workers": len(self._workers), "answers_checked": self.checked,
                "queries_answered": len(self.rows), "differs_from_sequential": self.differs,
                "first_error": self.first_error}


class SearchGenerator(LoadGenerator):
    """The load generator, sending searches to a :class:`WorkerPool` instead of HTTP."""

    def __init__(self, bounds: StepBounds, make_pool: Callable[[int], WorkerPool],
                 cap: int | None) -> None:
        super().__init__("database:", bounds)
        self.make_pool, self.cap = make_pool, cap
        self.pool: WorkerPool | None = None

    def open_client(self, connections: int) -> Any:
        return self.new_pool(connections)

    def new_pool(self, connections: int) -> WorkerPool:
        """A pool of ``connections`` workers (closed loop: the concurrency; open loop:
        ``max_in_flight``), at most ``cap`` (what the database accepts)."""
        self.pool = self.make_pool(min(connections, self.cap or connections))
        return self.pool

    async def attempt(self, client: Any, spec: RequestSpec,
                      result: StepMeasurement | None) -> str | None:
        assert spec.payload is not None
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(client.executor, client.search, spec.payload)


def step_bounds(section: LoadSection) -> StepBounds:
    return StepBounds(warmup_s=section.warmup_s, duration_s=section.duration_s,
                      max_requests=section.max_requests, timeout_s=section.timeout_s,
                      max_in_flight=section.max_in_flight)


def search_requests(n_queries: int) -> list[RequestSpec]:
    """One request per query row, in order (the generator cycles through them)."""
    return [RequestSpec(path="search", body=b"", payload=row) for row in range(n_queries)]


@dataclass(frozen=True)
class SearchDrive:
    """What a database sweep sends: its requests (cycled), a fresh generator per step,
    and what of the database server to sample (:mod:`evalq.retrieve.serverwatch`)."""

    requests: Sequence[RequestSpec]
    generator: Callable[[], SearchGenerator]
    watch: ServerWatch
    alive: Callable[[], bool] = lambda: True  # the index's own check (ConcurrentIndex.alive)
    # The end-to-end stage's model server, where evalq started it (Endpoint.alive): a
    # model that dies mid-step must not read as a database that did.
    model_alive: Callable[[], bool] | None = None


def sweep_searches(workload: Workload, section: LoadSection, drive: SearchDrive,
                   on_step: Callable[[dict[str, Any], StepMeasurement], None]
                   ) -> WorkloadOutcome:
    """One ``query`` workload's levels against the database, as the served sweep runs
    them (stop at the first failing step with ``stop_on_break``; the knee after), with
    the server's CPU and memory sampled per step where it can be (its process tree
    here, or the memory it reports: :mod:`evalq.execute.load.dbwatch`)."""
    requests = drive.requests
    outcome = WorkloadOutcome()
    steps: list[dict[str, Any]] = []
    outcome.series["search"] = steps
    for l_index, level in enumerate(workload.levels):
        gen = drive.generator()
        try:
            with DatabaseSampler(drive.watch) as sampler:
                if workload.mode == "open":
                    m = asyncio.run(gen.open_loop(requests, level,
                                                  seed=section.seed + l_index))
                else:
                    m = asyncio.run(gen.closed_loop(requests, int(level)))
        finally:
            if gen.pool is not None:
                gen.pool.close()
        figures = m.as_dict()
        verdict, reasons = judge_step(figures, workload, section.error_budget)
        assert gen.pool is not None or m.sent == 0
        database = gen.pool.record() if gen.pool is not None else {}
        if drive.model_alive is not None and not drive.model_alive():
            verdict, outcome.server_died, outcome.died = "server_died", True, "model server"
            reasons.append("the model server's process exited during the step")
        elif figures["errors"] and not drive.alive():
            verdict, outcome.server_died, outcome.died = "server_died", True, "database"
            reasons.append("the database stopped answering during the step (a new "
                           "session was refused after its searches failed)")
        step = {"series": "search", "level": level, **figures, "server": sampler.result,
                "database": database, "verdict": verdict, "reasons": reasons}
        steps.append(step)
        on_step(step, m)
        if outcome.server_died or (verdict != "pass" and section.stop_on_break):
            break
    outcome.knee, outcome.knee_series = knee_of(workload, outcome.series)
    return outcome


def check_pool(section: LoadSection, left: int | None, label: str, file: Path) -> None:
    """Refuse a closed-loop concurrency above the sessions the database accepts now
    (PostgreSQL's ``max_connections`` less reserved and open ones): exit 2 before any
    traffic, naming the workload's field. Open loop is capped instead (recorded)."""
    if left is None:
        return
    for i, w in enumerate(section.workloads):
        if w.kind != "query" or w.closed_loop is None:
            continue
        most = max(w.closed_loop.concurrency)
        if most > left:
            raise InputError(
                message=f"workload '{w.name}' asks for {most} concurrent searches, but "
                        f"{label} accepts {left} more connections (max_connections less "
                        "the reserved and open ones)",
                file=file, field=f"load.workloads.{i}.closed_loop.concurrency",
                fix=f"keep the concurrency at most {left} for load.databases, or raise "
                    "max_connections on that server")
