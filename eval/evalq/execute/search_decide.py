"""A search decided: explore, prune, confirm with Holm, the frontier and the one
recommendation (issue 31; the procedure is :mod:`evalq.decide.search`).

Reads what the run wrote (each combination's per-query values, the reference's, and the
combinations' costs in the manifest), so deciding is a function of the folder as the
summary is. Per dataset the queries are split once by seed; a combination's gates are the
recipe's (those whose ``variants:`` list its weight variant, or all), decided on every
dataset (``over: pooled`` gates too: a search decides dataset by dataset), and its
verdict is the worst of them:

1. **explore**: the gates at the recipe's confidence on the explore queries; the first
   allowed drop's metric, averaged over the explore queries (and datasets), is the
   quality the frontier is drawn from;
2. **prune**: :func:`~evalq.decide.search.survivors` keeps the ``search.survivors``
   cheapest combinations whose explore verdict is not ``fail``;
3. **confirm**: :func:`~evalq.decide.search.holm` decides the survivors on the confirm
   queries at one-sided level ``alpha / m`` (a gate's confidence ``1 - 2 × level``),
   stepping down; a pruned combination is ``not confirmed``.

The recommendation is the cheapest certified combination.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from evalq.core.errors import InputError
from evalq.core.gates import GateCheck, GateSpec, outcome
from evalq.core.values import PerQuery
from evalq.decide.drop_evidence import MIN_QUERIES
from evalq.decide.gate import decide_gates
from evalq.decide.search import (
    Point,
    QuerySplit,
    Verdict,
    cheapest_certified,
    holm,
    pareto_frontier,
    split_queries,
    survivors,
)
from evalq.plan.gates import GateConfig, gate_spec
from evalq.plan.load import CapacitySection
from evalq.plan.run import RunSections
from evalq.plan.search import Combination, SearchPlan
from evalq.results.folder import RunFolder
from evalq.results.schema import RunSummary
from evalq.results.searchpart import SearchPoint, SearchSplit, SearchSummary


@dataclass(frozen=True)
class _Decided:
    verdict: Verdict
    reasons: tuple[str, ...]


class _Values:
    """Per-query values of the reference and each combination, per dataset, read once."""

    def __init__(self, folder: RunFolder, reference: str, datasets: Sequence[str]) -> None:
        self.folder = folder
        self.reference = {ds: folder.read_per_query(ds, reference) for ds in datasets}
        self._cache: dict[tuple[str, str], PerQuery] = {}

    def of(self, ds: str, name: str) -> PerQuery:
        if (ds, name) not in self._cache:
            self._cache[(ds, name)] = self.folder.read_per_query(ds, name,
                                                                 like=self.reference[ds])
        return self._cache[(ds, name)]


def subset(values: PerQuery, ids: Sequence[str]) -> PerQuery:
    """``values`` restricted to the queries ``ids`` (in the values' own order)."""
    wanted = set(ids)
    rows = [i for i, q in enumerate(values.query_ids) if q in wanted]
    return PerQuery(tuple(values.query_ids[i] for i in rows),
                    {k: np.asarray(v)[rows] for k, v in values.values.items()})


def decide_search(search: SearchPlan, sections: RunSections,
                  variants: Mapping[str, Mapping[str, Any]], folder: RunFolder,
                  capacity: CapacitySection | None = None) -> SearchSummary:
    """The search's part of the summary (see the module docstring). ``variants``: the
    manifest's variant entries (their datasets hold the combinations' costs)."""
    section = search.section
    datasets = list(variants[sections.reference]["datasets"])
    values = _Values(folder, sections.reference, datasets)
    try:
        splits = {ds: split_queries(values.reference[ds].query_ids, seed=section.split.seed,
                                    explore_fraction=section.split.explore,
                                    min_confirm=MIN_QUERIES, where="search.split")
                  for ds in datasets}
    except InputError as exc:  # the run checked it: the stored recipe was edited since
        raise replace(exc, file=exc.file or folder.root / "manifest.json") from None
    specs = [(cfg, gate_spec(cfg, sections.stats.confidence, sections.stats))
             for cfg in sections.gates]
    quality_spec = next(s for _, s in specs if s.max_drop is not None
                        and s.against == "qrels")

    def decide(combo: Combination, part: str, level: float | None) -> _Decided:
        mine = _specs_for(specs, combo.weights, level)
        checks: list[GateCheck] = []
        for ds in datasets:
            ids = getattr(splits[ds], part)
            gate = decide_gates(mine, subset(values.of(ds, combo.name), ids),
                                subset(values.reference[ds], ids),
                                resamples=sections.stats.resamples, seed=sections.stats.seed)
            checks += [replace(c, gate=f"{c.gate} on {ds}") for c in gate.checks]
        verdict = outcome(checks, gated=True)
        return _Decided("inconclusive" if verdict == "ungated" else verdict,
                        tuple(f"{c.gate}: {c.reason}" for c in checks if not c.passed))

    combos = {c.name: c for c in search.combinations}
    explored = {name: decide(c, "explore", None) for name, c in combos.items()}
    costs = {name: _costs(c, variants, datasets, capacity) for name, c in combos.items()}
    check_costs(costs, section.cost)
    points = [Point(name, costs[name][section.cost + "_cost"],
                    _quality(values, splits, datasets, name, quality_spec))
              for name in combos]
    keep = survivors(points, {n: d.verdict for n, d in explored.items()}, section.survivors)
    confirmed: dict[str, _Decided] = {}

    def decide_at(name: str, level: float) -> Verdict:
        confirmed[name] = decide(combos[name], "confirm", level)
        return confirmed[name].verdict

    family = holm(keep, search.alpha, decide_at)
    marks = {name: family[name].mark if name in family else "not confirmed"
             for name in combos}
    frontier = pareto_frontier(points)
    return SearchSummary(
        axes=_axes(search), cost=section.cost, quality=quality_spec.column or
        quality_spec.metric, alpha=search.alpha, correction="holm", survivors=len(keep),
        split=SearchSplit(seed=section.split.seed, explore_fraction=section.split.explore,
                          explore_queries=sum(len(s.explore) for s in splits.values()),
                          confirm_queries=sum(len(s.confirm) for s in splits.values())),
        points=[_point(p, combos[p.name], costs[p.name], explored[p.name],
                       confirmed.get(p.name), marks[p.name],
                       family[p.name].alpha if p.name in family else None,
                       p.name in frontier) for p in points],
        frontier=frontier, recommendation=cheapest_certified(points, marks),
        encodings=search.encodings, minimum_encodings=search.encodings)


def with_search(summary: RunSummary, search: SearchSummary) -> RunSummary:
    """``summary`` with its search part; a search run passes when the search certified a
    combination (the variants' own gates are reported, and do not decide it)."""
    return summary.model_copy(update={"search": search,
                                      "passed": search.recommendation is not None})


def _specs_for(specs: Sequence[tuple[GateConfig, GateSpec]], weights: str,
               level: float | None) -> list[GateSpec]:
    """The gates that judge ``weights``' combinations; at a one-sided ``level`` their
    confidence is ``1 - 2 × level`` (the interval's lower bound is that level's test)."""
    mine = [s for cfg, s in specs if cfg.variants is None or weights in cfg.variants]
    if not mine:  # the gates all name other candidates: judge it by every gate
        mine = [s for _, s in specs]
    if level is None:
        return mine
    return [replace(s, confidence=1.0 - 2.0 * level) for s in mine]


def _quality(values: _Values, splits: Mapping[str, QuerySplit], datasets: Sequence[str],
             name: str, spec: GateSpec) -> float:
    """The quality metric's mean on the explore queries, averaged over the datasets."""
    column = spec.column or spec.metric
    means = [float(np.mean(subset(values.of(ds, name), splits[ds].explore).values[column]))
             for ds in datasets]
    return float(np.mean(means))


def _costs(combo: Combination, variants: Mapping[str, Mapping[str, Any]],
           datasets: Sequence[str], capacity: CapacitySection | None) -> dict[str, Any]:
    """A combination's measured costs: the weight variant's bytes and encode rates, the
    index it stores, dollars per 1M queries (one replica at the measured query rate, the
    capacity section's price per replica-hour), and each as the cost minimized (lower is
    cheaper: a rate's inverse)."""
    info = variants[combo.weights]
    quant = (info.get("backend") or {}).get("quantization") or {}
    weight_bytes = quant.get("weight_bytes") if isinstance(quant, dict) else None
    index_bytes, dims, recalls = 0, 0, []
    docs_rate = queries_rate = None
    for ds in datasets:
        entry = info["datasets"][ds]
        derived = entry["search"]["combinations"][combo.name]
        index_bytes += int(derived["index_bytes"])
        if derived.get("recall_at_10") is not None:
            recalls.append(float(derived["recall_at_10"]))
        dims = int(derived["dims"])
        encode = entry.get("encode") or {}
        docs_rate = docs_rate or (encode.get("documents") or {}).get("texts_per_s")
        queries_rate = queries_rate or (encode.get("queries") or {}).get("texts_per_s")
    price = capacity.price(combo.weights) if capacity is not None else None
    dollars = (price / (queries_rate * 3600.0) * 1e6
               if price is not None and queries_rate else None)
    figures = {"weight_bytes": weight_bytes, "index_bytes": index_bytes,
               "docs_per_s": docs_rate, "queries_per_s": queries_rate,
               "dollars_per_million_queries": dollars}
    for key, value in list(figures.items()):
        inverse = key.endswith("_per_s")
        figures[key + "_cost"] = (None if value is None else
                                  1.0 / value if inverse else float(value))
    figures["dims"] = dims
    figures["recall_at_10"] = float(np.mean(recalls)) if recalls else None
    return figures


def _point(p: Point, combo: Combination, costs: Mapping[str, Any], explored: _Decided,
           confirmed: _Decided | None, mark: Any, alpha: float | None,
           frontier: bool) -> SearchPoint:
    reasons = list((confirmed or explored).reasons)
    return SearchPoint(
        name=p.name, weights=combo.weights, vectors=combo.vectors.label,
        dims=int(costs["dims"]), index=combo.index_label, cost=p.cost,
        weight_bytes=costs["weight_bytes"], index_bytes=costs["index_bytes"],
        docs_per_s=costs["docs_per_s"], queries_per_s=costs["queries_per_s"],
        dollars_per_million_queries=costs["dollars_per_million_queries"],
        recall_at_10=costs["recall_at_10"], quality=p.quality, explore=explored.verdict,
        mark=mark, alpha=alpha,
        reasons=reasons, frontier=frontier)


def _axes(search: SearchPlan) -> dict[str, list[str]]:
    s = search.section
    axes = {"weights": list(s.weights), "vectors": [v.label for v in s.vectors],
            "dims": [str(d) for d in s.dims] if s.dims else ["full"]}
    if s.index:
        axes["index"] = sorted({c.index_label or "exact" for c in search.combinations})
    return axes


def check_costs(summary_costs: Mapping[str, Mapping[str, Any]], cost: str) -> None:
    """Every combination needs the figure the search minimizes; an encoding read from the
    cache has no throughput (nothing was computed)."""
    missing = sorted(name for name, c in summary_costs.items() if c.get(cost + "_cost") is None)
    if missing:
        raise InputError(message=f"search.cost {cost}: no measured figure for "
                         f"{len(missing)} combination(s), e.g. {missing[0]}",
                         field="search.cost",
                         fix="rerun with --no-cache (throughput is measured only when texts "
                         "are encoded), or use cost: index_bytes")
