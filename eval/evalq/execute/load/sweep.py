"""Workloads as requests, and the sweep that finds each workload's knee.

A workload becomes a pool of prepared requests (bodies serialized once): ``query`` sends
one short text per request (latency-bound), ``ingest`` a batch of passages per request
(throughput-bound; each batch size is its own series), ``rerank`` one query with ``depth``
candidate passages to a ``/rerank``-style route (``query`` + ``documents``, or TEI's
``texts``).

The sweep offers each level (rate or concurrency) in ascending order; a step *passes*
when its p99 is under the workload's SLO, its server-error rate and its failed requests
(timeouts included) are within the error budget, at least one request succeeded, the
generator sent every request it was asked to, (open loop) the offered rate was delivered
(``capacity.unsustained``: an undelivered level is ``unsustained``), and (with probes) its
answers held the quality floor (:mod:`evalq.execute.load.quality`). The first step that
fails ends the series (``stop_on_break``). The knee is the highest passing level before
that: its offered rate for open-loop query traffic, its achieved texts/s for ingest and
pairs/s for rerank, in the unit :mod:`evalq.execute.load.capacity` plans with.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from evalq.execute.load.capacity import NEEDS_ANSWERS, NEEDS_SUSTAINED, Knee, unsustained
from evalq.execute.load.generator import (
    LoadGenerator,
    RequestSpec,
    StepBounds,
    StepMeasurement,
    count_items,
)
from evalq.execute.load.quality import ProbeRun, judge_quality, step_quality
from evalq.execute.load.serverstats import ProcessSampler
from evalq.plan.load import LoadSection, Workload
from evalq.plan.loadbudget import MAX_POOL_TEXTS

Api = Literal["openai", "tei"]


@dataclass(frozen=True)
class Endpoint:
    """A served variant as the generator sees it."""

    variant: str
    url: str  # server root, without /v1
    api: Api
    model: str | None = None
    fields: dict[str, Any] = field(default_factory=dict)  # extra request fields (vLLM's)
    pid: int | None = None  # set when evalq started the server
    alive: Callable[[], bool] | None = None


def embed_request(endpoint: Endpoint, texts: Sequence[str], tokens: int) -> RequestSpec:
    if endpoint.api == "tei":
        payload: dict[str, Any] = {"inputs": list(texts), "truncate": True}
        path = "/embed"
    else:
        payload = {"input": list(texts), **endpoint.fields}
        if endpoint.model is not None:
            payload["model"] = endpoint.model
        path = "/v1/embeddings"
    return RequestSpec(path=path, body=json.dumps(payload).encode(), texts=len(texts),
                       tokens=tokens, expect=len(texts))


def rerank_request(endpoint: Endpoint, route: str, query: str, documents: Sequence[str],
                   tokens: int) -> RequestSpec:
    payload: dict[str, Any] = {"query": query}
    if endpoint.api == "tei":
        payload["texts"] = list(documents)
    else:
        payload["documents"] = list(documents)
        if endpoint.model is not None:
            payload["model"] = endpoint.model
    return RequestSpec(path=route, body=json.dumps(payload).encode(), texts=len(documents),
                       tokens=tokens, pairs=len(documents), expect=len(documents))


@dataclass(frozen=True)
class TextPool:
    """Texts to draw requests from, with their token counts (after truncation)."""

    queries: Sequence[str]
    query_tokens: Sequence[int]
    documents: Sequence[str]
    document_tokens: Sequence[int]


def _capped(texts_per_request: int, count: int) -> int:
    """How many prepared requests a series keeps: the sweep cycles through them, so past
    :data:`MAX_POOL_TEXTS` texts more bodies would only cost memory."""
    return max(1, min(count, MAX_POOL_TEXTS // max(1, texts_per_request)))


def build_series(endpoint: Endpoint, workload: Workload,
                 pool: TextPool) -> list[tuple[str, list[RequestSpec]]]:
    """``[(series label, requests)]``: one series, or one per ingest batch size; each
    series holds at most :data:`MAX_POOL_TEXTS` texts (:mod:`evalq.plan.loadbudget`)."""
    if workload.kind == "query":
        keep = _capped(1, len(pool.queries))
        reqs = [embed_request(endpoint, [q], n)
                for q, n in zip(pool.queries[:keep], pool.query_tokens[:keep])]
        return [("query", reqs)]
    if workload.kind == "ingest":
        out: list[tuple[str, list[RequestSpec]]] = []
        docs, toks = list(pool.documents), list(pool.document_tokens)
        for asked in workload.batch_sizes or []:
            # A batch larger than the corpus sends the whole corpus: the series is labelled
            # with what was sent (sizes that collapse onto one are measured once).
            # (and never more than the pool holds).
            size = min(asked, len(docs), MAX_POOL_TEXTS) if docs else min(asked, MAX_POOL_TEXTS)
            if any(label == f"batch={size}" for label, _ in out):
                continue
            reqs = []
            for start in range(0, len(docs), size)[:_capped(size, len(docs))]:
                batch = docs[start:start + size]
                if len(batch) < size:  # wrap around so every request is a full batch
                    batch = batch + docs[: size - len(batch)]
                tokens = sum(toks[(start + i) % len(toks)] for i in range(size))
                reqs.append(embed_request(endpoint, batch, tokens))
            out.append((f"batch={size}", reqs))
        return out
    depth = workload.depth or 1
    route = workload.endpoint or "/rerank"
    reqs = []
    docs = list(pool.documents)
    keep = _capped(depth, len(pool.queries))
    for i, (q, qn) in enumerate(zip(pool.queries[:keep], pool.query_tokens[:keep])):
        start = (i * depth) % max(1, len(docs))
        cands = [docs[(start + j) % len(docs)] for j in range(depth)]
        ctoks = sum(pool.document_tokens[(start + j) % len(docs)] for j in range(depth))
        reqs.append(rerank_request(endpoint, route, q, cands, qn * depth + ctoks))
    return [(f"depth={depth}", reqs)]


def judge_step(m: dict[str, Any], workload: Workload, error_budget: float) -> tuple[str, list[str]]:
    """``("pass" | "slo" | "errors" | "generator", reasons)`` for one step's figures."""
    reasons: list[str] = []
    verdict = "pass"
    p99 = m["latency_ms"]["p99"]
    if m["errors"].get("client_overload"):
        verdict = "generator"
        reasons.append(f"{m['errors']['client_overload']} requests not sent: more than "
                       "max_in_flight in flight (the generator, not the server, was measured)")
    if m["error_rate"] > error_budget:
        verdict = "errors"
        reasons.append(f"server errors {m['error_rate']:.1%} > error budget "
                       f"{error_budget:.1%} ({m['errors']})")
    if p99 is None or p99 > workload.slo_p99_ms:
        if verdict == "pass":
            verdict = "slo"
        reasons.append("no successful request" if p99 is None else
                       f"p99 {p99:.1f} ms > SLO {workload.slo_p99_ms:g} ms")
    # Timed-out requests are recorded at the timeout, which can be under the SLO: a step
    # whose requests failed is a failed step, whatever its p99 (a knee needs answers).
    failed_rate = m["error_rate"] + m["timeout_rate"]
    if verdict == "pass" and (not m["ok"] or failed_rate > error_budget):
        verdict = "failed"
        reasons.append(f"no successful request ({m['errors']})" if not m["ok"] else
                       f"failed requests (timeouts included) {failed_rate:.1%} > error budget "
                       f"{error_budget:.1%} ({m['errors']})")
    why = unsustained(m)
    if verdict == "pass" and why:
        verdict = "unsustained"
        reasons.append(why)
    return verdict, reasons


def _unit(workload: Workload) -> tuple[str, str]:
    return {"query": ("requests/s", "achieved_rps"), "ingest": ("texts/s", "texts_per_s"),
            "rerank": ("pairs/s", "pairs_per_s")}[workload.kind]


def knee_of(workload: Workload, series: dict[str, list[dict[str, Any]]]) -> tuple[Knee, str | None]:
    """The best knee over the series, and the series it came from."""
    unit, column = _unit(workload)
    best: tuple[float, str, bool, float] | None = None
    for label, steps in series.items():
        passing: list[dict[str, Any]] = []
        broke = False
        for step in steps:
            if step["verdict"] != "pass":
                broke = True
                break
            passing.append(step)
        if not passing:
            continue
        if workload.kind == "query" and workload.mode == "open":
            at = passing[-1]
            value = float(at["offered_rps"])
        else:
            # Closed loop: throughput is not monotone in concurrency on a saturated server
            # (2 clients got 4.9 texts/s where 1 got 7.0): the best passing step is the knee.
            at = max(passing, key=lambda s: float(s.get(column) or 0.0))
            value = float(at.get(column) or 0.0)
        if best is None or value > best[0]:
            best = (value, label, not broke, float(at["level"]))
    if best is None:
        first = next((s for steps in series.values() for s in steps), None)
        why = "; ".join(first["reasons"]) if first else "no step ran"
        if first is not None and first["verdict"] == "unsustained":
            return Knee(workload.kind, None, unit, reason=f"the first level was not "
                        f"sustained ({why}): {NEEDS_SUSTAINED}"), None
        if first is not None and first["verdict"] == "quality":
            return Knee(workload.kind, None, unit, reason=f"quality under load broke at the "
                        f"first step ({why})"), None
        if first is not None and first["verdict"] == "failed":
            return Knee(workload.kind, None, unit, reason=f"requests failed at the first step "
                        f"({why}): {NEEDS_ANSWERS}"), None
        return Knee(workload.kind, None, unit, reason=f"the SLO broke at the first step ({why})"
                    ), None
    return Knee(workload.kind, best[0], unit, lower_bound=best[2], level=best[3]), best[1]


@dataclass
class WorkloadOutcome:
    series: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    knee: Knee | None = None
    knee_series: str | None = None
    server_died: bool = False
    died: str = "server"  # which server (a database stage: "database" or "model server")

    @property
    def broken(self) -> list[str]:
        """Why this workload makes ``evalq load`` exit 1 (empty: it does not)."""
        out = []
        if self.knee is not None and self.knee.per_s is None:
            out.append(self.knee.reason)
        for steps in self.series.values():
            for s in steps:
                if s["verdict"] in ("errors", "generator", "server_died"):
                    out.append(f"{s['series']} level {s['level']:g}: {'; '.join(s['reasons'])}")
        return out


def knee_record(outcome: WorkloadOutcome) -> dict[str, Any]:
    """A workload's ``knee`` in the summary, with the step that stopped it (why the knee
    is not higher: latency, errors, quality)."""
    knee = outcome.knee
    assert knee is not None
    out: dict[str, Any] = {"per_s": knee.per_s, "unit": knee.unit,
                           "lower_bound": knee.lower_bound, "series": outcome.knee_series,
                           "reason": knee.reason, "level": knee.level}
    stop = next((s for s in outcome.series.get(outcome.knee_series or "", [])
                 if s["verdict"] != "pass"), None)
    if stop is not None:
        out["stopped_by"] = (f"{stop['verdict']} at level {stop['level']:g}: "
                             f"{'; '.join(stop['reasons'])}")
    return out


def run_workload(endpoint: Endpoint, workload: Workload, section: LoadSection, pool: TextPool,
                 on_step: Callable[[dict[str, Any], StepMeasurement], None],
                 probes: ProbeRun | None = None) -> WorkloadOutcome:
    """Sweep one workload against one endpoint; ``on_step`` sees each finished step.
    With ``probes``, each step carries probe texts and records their ``quality``
    (:mod:`evalq.execute.load.quality`), which a step must also hold to pass."""
    bounds = StepBounds(warmup_s=section.warmup_s, duration_s=section.duration_s,
                        max_requests=section.max_requests, timeout_s=section.timeout_s,
                        max_in_flight=section.max_in_flight)
    outcome = WorkloadOutcome()
    if workload.kind == "rerank":  # scores, not vectors: nothing to compare
        probes = None
    for s_index, (label, requests) in enumerate(build_series(endpoint, workload, pool)):
        steps: list[dict[str, Any]] = []
        outcome.series[label] = steps
        if probes is not None:
            requests = probes.interleave(workload.kind, requests)
        for l_index, level in enumerate(workload.levels):
            collector = probes.collector() if probes is not None else None
            gen = LoadGenerator(endpoint.url, bounds, validate=count_items if collector is None
                                else collector.validator(count_items))
            with ProcessSampler(endpoint.pid) as sampler:
                if workload.mode == "open":
                    seed = section.seed + 1000 * s_index + l_index
                    m = asyncio.run(gen.open_loop(requests, level, seed=seed))
                else:
                    m = asyncio.run(gen.closed_loop(requests, int(level)))
            figures = m.as_dict()
            verdict, reasons = judge_step(figures, workload, section.error_budget)
            if probes is not None and collector is not None:
                figures["quality"] = step_quality(probes, collector)
                verdict, reasons = judge_quality(verdict, reasons, figures["quality"],
                                                 probes.floor)
            if endpoint.alive is not None and not endpoint.alive():
                verdict = "server_died"
                reasons.append("the server process exited during the step")
                outcome.server_died = True
            step = {"series": label, "level": level, **figures, "server": sampler.result,
                    "verdict": verdict, "reasons": reasons}
            steps.append(step)
            on_step(step, m)
            if outcome.server_died or (verdict != "pass" and section.stop_on_break):
                break
        if outcome.server_died:
            break
    outcome.knee, outcome.knee_series = knee_of(workload, outcome.series)
    return outcome
