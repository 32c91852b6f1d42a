"""A swept search-time parameter judged at each value, and its cheapest certified point
(issue 30, "a parameter sweep as a curve").

At scoring time (:func:`record_sweep`) each point of
:func:`evalq.retrieve.sweep.sweep_index` is measured and its per-query values are stored
as the variant's own are (:func:`evalq.execute.dataset_scoring.write_loss_views`):
``<name>.sweep<i>`` (qrels measures, and reference measures against the reference's exact
run: the end-to-end loss at that value) and ``<name>.sweep<i>.index`` (reference measures
against the variant's own exact run: the index loss). The manifest's index entry gets the
measured figures: recall@10 against the variant's exact kNN, nDCG@10, overlap@10 against
the reference's exact run, p50 / p99 per query and queries/s.

At summary time (:func:`sweep_summary`, also under ``evalq gate``) every per-dataset gate
of the variant is decided at each value by the one gate path
(:func:`evalq.execute.losses.decide_losses`), with the model loss (the exact search, the
same at every value) unchanged.

Error control: choosing the cheapest value that passes out of k is k tests, so testing each
at α and picking any that passes would certify a value more often than α allows. The
sweep uses the fixed-sequence procedure: the values are tested in an order fixed before
the data (most accurate first: every swept parameter buys accuracy as it grows, so the
recipe's increasing list is read backwards), each at the gate's own full α, and testing
stops at the first value that does not pass; values after it are not tested and are not
certified. A pre-ordered hierarchy of tests where each is reached only if every earlier
one rejected controls the family-wise error at α (the first true null reached is the only
one that can be falsely rejected, with probability at most α), whatever the losses really
do along the list; monotone accuracy only makes the order powerful, not valid. Bonferroni
/ Holm would test each at α/k, losing power for nothing on an ordered curve.

The cheapest certified point: among the certified values, the one with the lowest p50
latency per query, ties broken by the lower value. The variant's own verdict and run stay
those of its configured value; the sweep is an added part of the summary.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from evalq.core.gates import GateSpec, Outcome
from evalq.core.ranking import Ranking
from evalq.core.values import PerQuery
from evalq.decide.summary_stats import align
from evalq.execute.losses import Pair, decide_losses
from evalq.measure.judged import evaluate as evaluate_qrels
from evalq.measure.reference import evaluate_reference
from evalq.measure.registry import parse_measures
from evalq.plan.run import RunSections
from evalq.results import schema as rs
from evalq.results.folder import RunFolder, clean_json
from evalq.retrieve.kinds import recall_at
from evalq.retrieve.sweep import SweepPoint

_AT = 10  # the curve's cut-off: recall@10, nDCG@10, overlap@10


def point_name(variant: str, i: int) -> str:
    """The per-query values' name of a variant's ``i``-th swept value."""
    return f"{variant}.sweep{i}"


def record_sweep(folder: RunFolder, dataset: str, name: str, sections: RunSections,
                 judged: Any, reference_run: Ranking, exact: Ranking,
                 swept: tuple[str, tuple[SweepPoint, ...]], configured: float | None,
                 q_agree: Any) -> dict[str, Any]:
    """Store each point's per-query values; the manifest's record of the sweep."""
    parameter, points = swept
    metrics = parse_measures(sections.metrics)
    ref_measures = parse_measures(sections.reference_metrics)
    ranking_measures = [m for m in ref_measures if m.family != "cosine"]
    curve_qrels, curve_ref = parse_measures([f"nDCG@{_AT}"]), parse_measures([f"overlap@{_AT}"])
    out = []
    for i, point in enumerate(points):
        qrels = evaluate_qrels(point.ranking, judged, metrics)
        own = dict(qrels.values)
        own.update(align(evaluate_reference(point.ranking, reference_run, ref_measures,
                                            query_agreement=q_agree), qrels.query_ids))
        folder.write_per_query(dataset, point_name(name, i), PerQuery(qrels.query_ids, own))
        index = dict(qrels.values)
        index.update(align(evaluate_reference(point.ranking, exact, ranking_measures),
                           qrels.query_ids))
        folder.write_per_query(dataset, f"{point_name(name, i)}.index",
                               PerQuery(qrels.query_ids, index))
        ndcg = evaluate_qrels(point.ranking, judged, curve_qrels).values[f"nDCG@{_AT}"]
        overlap = evaluate_reference(point.ranking, reference_run,
                                     curve_ref).values[f"overlap@{_AT}"]
        out.append(clean_json({
            "value": point.value, "recall@10": _mean(recall_at(point.ranking, exact, _AT)),
            "nDCG@10": _mean(ndcg), "overlap@10": _mean(overlap), **point.latency(),
            "exact": point.proof.exact, "proof": point.proof.model_dump()}))
    return {"parameter": parameter, "configured": configured, "points": out}


def _mean(values: Any) -> float | None:
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean()) if len(arr) and np.isfinite(arr).all() else None


@dataclass(frozen=True)
class Tested:
    """One value's place in the fixed sequence."""

    value: float
    p50_ms: float | None
    verdict: Outcome
    tested: bool
    certified: bool


def fixed_sequence(values: Sequence[float], verdicts: Sequence[Outcome],
                   p50_ms: Sequence[float | None]) -> tuple[list[Tested], float | None]:
    """Each value (given in increasing order, i.e. least accurate first) tested from the
    last to the first, stopping at the first whose verdict is not ``pass``; and the
    cheapest certified value (lowest p50, then lowest value; None when none passed)."""
    reached = True
    tested: dict[int, bool] = {}
    for i in reversed(range(len(values))):
        tested[i] = reached
        if verdicts[i] != "pass":
            reached = False
    rows = [Tested(v, p, verdicts[i], tested[i], tested[i] and verdicts[i] == "pass")
            for i, (v, p) in enumerate(zip(values, p50_ms))]
    certified = [r for r in rows if r.certified]
    if not certified:
        return rows, None
    inf = float("inf")
    best = min(certified, key=lambda r: (inf if r.p50_ms is None else r.p50_ms, r.value))
    return rows, best.value


def sweep_summary(specs: Sequence[GateSpec], pairs: Mapping[str, Pair | None],
                  folder: RunFolder, dataset: str, name: str, record: Mapping[str, Any],
                  ref_values: PerQuery, *, extra_values: Mapping[str, np.ndarray] | None,
                  resamples: int, seed: int) -> rs.SweepSummary:
    """The sweep's summary part: every per-dataset gate (``specs``) decided at each value
    on that value's stored values, then the fixed sequence and the cheapest point."""
    parameter, points = record["parameter"], record["points"]
    model, index = pairs["model"], pairs["index"]
    gates, verdicts = [], []
    for i in range(len(points)):
        own = folder.read_per_query(dataset, point_name(name, i), like=ref_values)
        at_index = folder.read_per_query(dataset, f"{point_name(name, i)}.index",
                                         like=ref_values)
        point_pairs: dict[str, Pair | None] = {
            "model": model, "end_to_end": (own, ref_values),
            "index": None if index is None else (at_index, index[1])}
        gate = decide_losses(specs, point_pairs, extra_values=extra_values,
                             resamples=resamples, seed=seed)
        gates.append(gate)
        verdicts.append(gate.verdict)
    rows, cheapest = fixed_sequence([p["value"] for p in points], verdicts,
                                    [p.get("p50_ms") for p in points])
    typed = []
    for point, row, gate in zip(points, rows, gates):
        checks = [rs.GateCheck.model_validate(
            {**c.to_dict(), "gate": f"{c.gate} at {parameter}={point['value']} on {dataset}"})
            for c in gate.checks]
        typed.append(rs.SweepPoint(
            value=point["value"], recall_at_10=point.get("recall@10"),
            ndcg_at_10=point.get("nDCG@10"), overlap_at_10=point.get("overlap@10"),
            p50_ms=point.get("p50_ms"), p99_ms=point.get("p99_ms"),
            queries_per_s=point.get("queries_per_s"), exact=bool(point.get("exact")),
            verdict=row.verdict, tested=row.tested, certified=row.certified,
            checks=checks))
    return rs.SweepSummary(parameter=parameter, configured=record.get("configured"),
                           procedure="fixed_sequence", cheapest=cheapest,
                           alpha={s.label: round(1.0 - s.confidence, 12) for s in specs},
                           points=typed)
