"""Capacity arithmetic: from the knees one replica reached to replicas and dollars.

Pure functions over plain values, so the arithmetic is testable without any server.

One replica serves every workload of the deployment, so their demands add up as shares
of a replica's capacity at the SLO (its knee):

    load = target_qps / query_knee_rps
         + target_qps · rerank_depth / rerank_knee_pairs_per_s
         + ingest_docs_per_day / 86400 / ingest_knee_texts_per_s

    replicas = max(min_replicas, ceil(load / headroom))

``headroom`` (default 0.8) keeps each replica below its knee, where p99 is still under
the SLO. Rerank capacity is counted in pairs per second, so a rerank workload measured at
one depth plans for another depth linearly (a first-order assumption, stated in the
plan). Cost per million queries = replicas · $/replica-hour / (target_qps · 3600) · 10⁶.

A workload whose SLO broke at the very first step has no knee: more replicas do not make
one request faster, so the plan is *infeasible* for that variant, with the reason. So is
one whose first step's requests failed (timed out, or none succeeded): a knee and a plan
need successful requests. And so is one whose first open-loop level was not delivered
(:func:`unsustained`: sent late, or offered over too short a time to measure): a knee
read from a rate nobody served would plan capacity that does not exist.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

SECONDS_PER_DAY = 86_400.0
# Ends the reason of a knee whose first step's requests failed (timeouts, no answer): not
# a slow server that more replicas cannot speed up, but traffic that measured nothing.
NEEDS_ANSWERS = "a knee and a capacity plan need successful requests"
# Ends the reason of a knee whose first level the generator did not deliver.
NEEDS_SUSTAINED = "a knee and a capacity plan need a level that was sustained"
# An open-loop level counts only if the generator delivered it: its requests went out on
# their schedule, the p99 send lag (send - scheduled) within SUSTAIN_LAG_SHARE of the
# period they were offered over, and that period at least MIN_OFFERED_S. Below that a
# clock tick and the event loop, not the server, are measured: 20 requests "offered at
# 10^9/s" are scheduled in 20 ns and sent over milliseconds. (A server that falls
# behind is the SLO's to judge: latency counts from the scheduled time.)
SUSTAIN_LAG_SHARE = 0.1
MIN_OFFERED_S = 0.01


def unsustained(figures: Mapping[str, Any]) -> str | None:
    """Why an open-loop step's offered rate was not delivered (None: it was, or the step
    is closed-loop, whose level is a concurrency the generator always holds)."""
    if figures.get("mode") != "open":
        return None
    offered = figures.get("offered_realized_rps")
    window = float(figures.get("sent") or 0) / offered if offered else 0.0
    lag_ms = ((figures.get("generator") or {}).get("lag_ms") or {}).get("p99") or 0.0
    rate = f"{offered:.4g} req/s" if offered else "the level"
    if window < MIN_OFFERED_S:
        return (f"unsustained: {figures.get('sent', 0)} requests at {rate} were offered over "
                f"{window * 1e3:.3g} ms, under the {MIN_OFFERED_S * 1e3:g} ms a rate can be "
                "measured over; no knee or capacity is read from it (raise max_requests or "
                "duration_s, or lower the rate)")
    if lag_ms / 1e3 > SUSTAIN_LAG_SHARE * window:
        return (f"unsustained: the generator sent {rate} late (p99 send lag {lag_ms:.3g} ms, "
                f"over {SUSTAIN_LAG_SHARE:.0%} of the {window * 1e3:.4g} ms offered); no "
                "knee or capacity is read from it")
    return None


@dataclass(frozen=True)
class Knee:
    """What one replica sustained with p99 under the SLO.

    ``per_s`` is in the workload's own unit: requests/s for ``query``, texts/s for
    ``ingest``, pairs/s for ``rerank``. ``lower_bound`` says the sweep never broke the
    SLO, so the true knee is higher than measured. ``level`` is the sweep step it was
    read from (offered rate or concurrency), so a table finds that step by its level.
    """

    kind: str
    per_s: float | None
    unit: str
    lower_bound: bool = False
    reason: str = ""
    level: float | None = None


@dataclass(frozen=True)
class Demand:
    target_qps: float
    rerank_depth: int | None = None
    ingest_docs_per_day: float | None = None
    headroom: float = 0.8
    min_replicas: int = 1


@dataclass
class VariantPlan:
    variant: str
    feasible: bool
    replicas: int | None
    load: float | None  # replicas' worth of work at the target (before headroom)
    shares: dict[str, float] = field(default_factory=dict)
    dollars_per_hour: float | None = None
    dollars_per_million_queries: float | None = None
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def needed_kinds(demand: Demand) -> list[str]:
    kinds = ["query"]
    if demand.rerank_depth:
        kinds.append("rerank")
    if demand.ingest_docs_per_day:
        kinds.append("ingest")
    return kinds


def plan_variant(variant: str, knees: Mapping[str, Knee], demand: Demand,
                 price_per_hour: float | None) -> VariantPlan:
    """Replicas and cost for one variant from its knees (see the module docstring)."""
    shares: dict[str, float] = {}
    notes: list[str] = []
    for kind in needed_kinds(demand):
        knee = knees.get(kind)
        if knee is None:
            notes.append(f"no '{kind}' workload was measured: the plan leaves out its demand")
            continue
        if knee.per_s is None or knee.per_s <= 0:
            why = knee.reason or "no knee"
            return VariantPlan(variant, feasible=False, replicas=None, load=None,
                               notes=[*notes, f"{kind}: {why}"
                                      if why.endswith((NEEDS_ANSWERS, NEEDS_SUSTAINED))
                                      else f"{kind}: {why}; more replicas do not make one "
                                      "request faster"])
        if kind == "query":
            shares[kind] = demand.target_qps / knee.per_s
        elif kind == "rerank":
            shares[kind] = demand.target_qps * (demand.rerank_depth or 0) / knee.per_s
        else:
            shares[kind] = (demand.ingest_docs_per_day or 0) / SECONDS_PER_DAY / knee.per_s
        if knee.lower_bound:
            notes.append(f"{kind}: the sweep never broke the SLO; its knee is at least "
                         f"{knee.per_s:.4g} {knee.unit}, so this plan may overestimate")
    if not shares:
        return VariantPlan(variant, feasible=False, replicas=None, load=None,
                           notes=[*notes, "nothing measured to plan from"])
    load = sum(shares.values())
    replicas = max(demand.min_replicas, math.ceil(load / demand.headroom - 1e-9))
    plan = VariantPlan(variant, feasible=True, replicas=replicas, load=load, shares=shares,
                       notes=notes)
    if price_per_hour is not None:
        plan.dollars_per_hour = replicas * price_per_hour
        plan.dollars_per_million_queries = (plan.dollars_per_hour
                                            / (demand.target_qps * 3600.0) * 1e6)
    return plan


@dataclass(frozen=True)
class DecisionRow:
    variant: str
    # a stored verdict (core.gates: "pass" | "fail" | "inconclusive" | "ungated"),
    # "reference", or "unknown" (no evalq run of the recipe to read)
    quality: str
    parity: str  # "ok" | "differs" | "not checked"
    plan: VariantPlan

    def sentence(self) -> str:
        quality = {"pass": "passes quality", "fail": "FAILS quality",
                   "inconclusive": "quality inconclusive",
                   "ungated": "quality ungated (no gate applies)",
                   "reference": "reference", "unknown": "quality not run"}[self.quality]
        if not self.plan.feasible:
            return f"{self.variant}: {quality}, infeasible ({'; '.join(self.plan.notes)})"
        cost = ("" if self.plan.dollars_per_million_queries is None
                else f", ${self.plan.dollars_per_million_queries:.2f} per 1M queries")
        return f"{self.variant}: {quality}, {self.plan.replicas} replicas{cost}"


def recommend(rows: list[DecisionRow]) -> str | None:
    """The cheapest feasible variant whose quality passed (or is the reference)."""
    ok = [r for r in rows if r.plan.feasible and r.quality in ("pass", "reference")]
    if not ok:
        return None

    def cost(r: DecisionRow) -> tuple[float, int]:
        dollars = r.plan.dollars_per_million_queries
        return (math.inf if dollars is None else dollars, r.plan.replicas or 0)

    best = min(ok, key=cost)
    return f"cheapest variant that keeps quality: {best.sentence()}"
