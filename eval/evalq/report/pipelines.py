"""The rerank pipelines of a results folder, as every report shows them.

``summary.json`` key ``pipelines`` (written by ``evalq.execute.pipelines``) holds, per pipeline,
dataset and depth, every first-stage × reranker combination with its metrics and paired
difference from the reference pipeline, the attribution of a candidate+candidate
combination's change to retriever, reranker and interaction, the reranker's score
fidelity, the gate verdicts, and the cost of each stage. This module reads that part
once into plain rows; the console, markdown, JUnit and HTML reports render the same rows,
so no output can show a pipeline differently from another (or leave it out). Nothing
here computes a statistic.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from evalq.core.gates import GateCheck, outcome
from evalq.report.runview import finite
from evalq.results import schema as rs

ATTRIBUTION_PARTS = ("retriever_only", "reranker_only", "interaction", "total")


@dataclass(frozen=True)
class Interval:
    """A stored figure: a value (or a paired delta) with its interval; ``None`` if absent."""

    value: float | None
    low: float | None = None
    high: float | None = None

    @classmethod
    def of(cls, entry: rs.MeanEntry | None) -> Interval:
        """A stored mean with its interval."""
        if entry is None:
            return cls(None)
        return cls(finite(entry.value), finite(entry.ci_low), finite(entry.ci_high))

    @classmethod
    def paired(cls, entry: rs.PairedEntry | None) -> Interval:
        """A stored paired difference with its interval."""
        if entry is None:
            return cls(None)
        return cls(finite(entry.delta), finite(entry.ci_low), finite(entry.ci_high))

    def text(self, signed: bool = False, digits: int = 4) -> str:
        if self.value is None:
            return "—"
        sign = "+" if signed else ""
        head = f"{self.value:{sign}.{digits}f}"
        if self.low is None or self.high is None:
            return head
        return f"{head} [{self.low:{sign}.{digits}f}, {self.high:{sign}.{digits}f}]"


@dataclass(frozen=True)
class GateCheckRow:
    gate: str
    verdict: str
    passed: bool
    reason: str


@dataclass(frozen=True)
class Combination:
    """One first stage × reranker at one depth (``kind``: reference, retriever, reranker,
    both: which stages differ from the reference pipeline)."""

    name: str
    dataset: str
    depth: int
    first_stage: str
    reranker: str
    kind: str
    recall: Interval
    metrics: dict[str, Interval]
    deltas: dict[str, Interval]
    attribution: dict[str, dict[str, Interval]]
    checks: list[GateCheckRow]
    gate_passed: bool | None
    verdict: str | None = None  # as the run decided it (folders from before: None)


@dataclass(frozen=True)
class Fidelity:
    dataset: str
    depth: int
    reranker: str
    measures: dict[str, Interval]
    mean_abs_delta: float | None
    p99_abs_delta: float | None
    pairs: int | None


@dataclass(frozen=True)
class StageCost:
    """A stage's cost on one dataset at one depth (the first stage: ``depth`` is None)."""

    dataset: str
    stage: str
    name: str
    depth: int | None
    seconds_per_query: float | None
    forward_passes_per_query: float | None
    pairs_per_s: float | None = None
    weight_bytes: float | None = None
    multiplier: float | None = None


@dataclass
class PipelineView:
    name: str
    passed: bool | None
    failed_gates: list[str]
    note: str | None
    metrics: list[str]
    combinations: list[Combination] = field(default_factory=list)
    fidelity: list[Fidelity] = field(default_factory=list)
    costs: list[StageCost] = field(default_factory=list)

    def gate_label(self, combo: Combination) -> str:
        """The label `evalq gate` prints for a combination's verdict (pipeline_regate)."""
        return f"pipeline {self.name} {combo.dataset} {combo.name}"


def _checks(gate: rs.GateResult | None) -> list[GateCheckRow]:
    return [GateCheckRow(c.gate, c.verdict, c.passed, c.reason)
            for c in (gate.checks if gate is not None else [])]


def _attribution(parts: rs.Attribution) -> dict[str, Interval]:
    return {"retriever_only": Interval.paired(parts.retriever_only),
            "reranker_only": Interval.paired(parts.reranker_only),
            "interaction": Interval.paired(parts.interaction),
            "total": Interval.paired(parts.total)}


def _combination(ds: str, depth: int, name: str, e: rs.Combination) -> Combination:
    return Combination(
        name=name, dataset=ds, depth=depth, first_stage=e.first_stage,
        reranker=e.reranker, kind=e.kind,
        recall=Interval.of(e.first_stage_recall),
        metrics={m: Interval.of(v) for m, v in e.metrics.items()},
        deltas={m: Interval.paired(v.vs_reference) for m, v in e.metrics.items()
                if v.vs_reference is not None},
        attribution={m: _attribution(parts) for m, parts in (e.attribution or {}).items()},
        checks=_checks(e.gate), gate_passed=None if e.gate is None else e.gate.passed,
        verdict=e.verdict)


def _costs(ds: str, cost: rs.PipelineCost) -> list[StageCost]:
    fs = cost.first_stage
    out = [StageCost(ds, "first stage", fs.name, None, finite(fs.seconds_per_query),
                     finite(fs.forward_passes_per_query))]
    for name, r in cost.rerankers.items():
        for depth, d in r.depths.items():
            out.append(StageCost(ds, "reranker", name, int(depth),
                                 finite(d.rerank_seconds_per_query),
                                 finite(d.forward_passes_per_query),
                                 finite(r.pairs_per_s), finite(r.weight_bytes),
                                 finite(d.rerank_cost_multiplier_vs_first_stage)))
    return out


def _view(name: str, p: rs.PipelineSummary) -> PipelineView:
    view = PipelineView(name=name, passed=p.passed, failed_gates=list(p.failed_gates),
                        note=p.note, metrics=[])
    for ds, d in p.datasets.items():
        for depth_key, at in d.depths.items():
            depth = int(depth_key)
            for combo, entry in at.combinations.items():
                c = _combination(ds, depth, combo, entry)
                view.combinations.append(c)
                view.metrics += [m for m in c.metrics if m not in view.metrics]
            for reranker, fid in at.fidelity.items():
                drift = fid.drift
                view.fidelity.append(Fidelity(
                    ds, depth, reranker,
                    {m: Interval.of(v) for m, v in fid.measures.items()},
                    finite(drift.mean_abs_delta), finite(drift.p99_abs_delta), drift.pairs))
    for ds, cost in p.cost.items():
        view.costs += _costs(ds, cost)
    return view


def pipeline_views(summary: rs.RunSummary | None) -> list[PipelineView]:
    """Every pipeline of a run's summary, in recipe order (empty for a run without any)."""
    if summary is None:
        return []
    return [_view(name, p) for name, p in (summary.pipelines or {}).items()]


def attribution_text(parts: Mapping[str, Interval]) -> str:
    """``retriever −0.0073, reranker +0.0089, interaction +0.0021 (total +0.0038)``."""
    def fig(key: str) -> str:
        return parts[key].text(signed=True, digits=4).split(" [")[0]
    return (f"retriever {fig('retriever_only')}, reranker {fig('reranker_only')}, "
            f"interaction {fig('interaction')} (total {fig('total')})")


def verdict_text(combo: Combination) -> str:
    if combo.kind == "reference":
        return "reference"
    if combo.verdict is not None:
        return combo.verdict
    # Written before combinations carried a verdict: the same rule, from the checks.
    return outcome([GateCheck(c.gate, c.passed, c.verdict, c.reason)  # type: ignore[arg-type]
                    for c in combo.checks], gated=combo.gate_passed is not None)


def print_pipelines(console: Any, views: list[PipelineView]) -> None:
    """The console part of ``evalq run`` for pipelines: a table per pipeline (quality,
    attribution, verdicts), fidelity and cost lines, and every failed gate's reason."""
    from rich.markup import escape
    from rich.table import Table

    for view in views:
        table = Table(title=f"pipeline {view.name} · Δ vs the reference pipeline",
                      title_justify="left", box=None, pad_edge=False, padding=(0, 1))
        for col in ("dataset", "combination", "kind", "recall", *view.metrics, "verdict"):
            table.add_column(col, no_wrap=True)
        for c in view.combinations:
            cells = [c.deltas[m].text(signed=True) if m in c.deltas
                     else c.metrics.get(m, Interval(None)).text() for m in view.metrics]
            table.add_row(escape(c.dataset), escape(c.name), c.kind,
                          c.recall.text().split(" [")[0], *cells, verdict_text(c))
        console.print(table)
        for c in view.combinations:
            for m, parts in c.attribution.items():
                console.print(f"  {escape(c.name)} {escape(m)}: {attribution_text(parts)}",
                              highlight=False)
        for f in view.fidelity:
            tau = f.measures.get("score_tau")
            console.print(f"  fidelity {escape(f.reranker)}@{f.depth} ({escape(f.dataset)}): "
                          + (f"score_tau {tau.text()}, " if tau else "")
                          + f"mean |Δscore| {_num(f.mean_abs_delta)}", highlight=False)
        for s in view.costs:
            if s.stage == "reranker":
                console.print(f"  cost {escape(s.name)}@{s.depth} ({escape(s.dataset)}): "
                              f"{_num(s.seconds_per_query)} s/query, "
                              f"{_num(s.multiplier, 1)}× the first stage, "
                              f"{_num(s.pairs_per_s, 1)} pairs/s", highlight=False)
        for c in view.combinations:
            for check in c.checks:
                if not check.passed:
                    colour = "red" if check.verdict == "fail" else "yellow"
                    console.print(f"[{colour}]{check.verdict}[/{colour}] "
                                  f"{escape(view.gate_label(c))}: {escape(check.gate)} — "
                                  f"{escape(check.reason)}", highlight=False)
        if view.note:
            console.print(f"  note: {escape(view.note)}", highlight=False)


def _num(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}f}"
