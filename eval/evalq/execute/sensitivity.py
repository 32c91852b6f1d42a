"""``batch_sensitivity:``: how far a batch-dependent candidate moves with its batching.

A batch-dependent encoder (:mod:`evalq.encode.composition`) gives a text a vector that depends on
its neighbours, so the batching an evaluation happens to use is one draw among many a
deployment will see. This module re-encodes each such candidate (or the ones named) on a
slice of each dataset under several *compositions*:

- ``as-run``: the run's own vectors of the slice's texts (its budget and order; nothing
  is re-encoded);
- ``tokens-B`` for each budget ``B`` in ``batch_tokens``: the same order cut to another
  padded budget (other neighbours, other batch sizes);
- ``shuffle-S``: the run's budget, each cache chunk sent in a seeded random order
  (random neighbours), for ``shuffles`` seeds.

Each composition is scored like the run itself (search, metrics against qrels and the
reference, gates) against the reference's vectors of the same slice (the reference is
not re-encoded). The summary reports the per-text cosine between compositions (mean, p1,
min over texts of the lowest pairwise cosine), the range of every gated metric across
compositions and the gate verdict under each; with ``verdict: worst`` (the default) the
candidate passes only if it passes under every composition, and the summary says so.

Per-composition values are stored under ``per_query/<dataset>/batch-sensitivity/...``, so
``evalq gate`` re-decides them like everything else.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from evalq.core.compositions import outcome_clause
from evalq.core.gates import VariantGate
from evalq.core.values import PerQuery
from evalq.decide.gate import decide_gates
from evalq.decide.summary_stats import column
from evalq.encode.composition import declared_dependence
from evalq.measure.registry import parse_measure
from evalq.plan.run import RunSections
from evalq.plan.sensitivity import BatchSensitivity

if TYPE_CHECKING:
    from evalq.core.gates import GateSpec
    from evalq.engines.options import EncoderVariant
    from evalq.results.folder import RunFolder

# Stored names hold a "/" (a variant name cannot), so they never collide with a variant
# and stay out of per_query/<dataset>/*.jsonl listings.
_STORED_PREFIX = "batch-sensitivity"


@dataclass(frozen=True)
class Composition:
    """One way to batch the same texts."""

    id: str
    batch_tokens: int
    shuffle_seed: int | None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def compositions(opts: BatchSensitivity, run_tokens: int) -> list[Composition]:
    """``as-run`` first, then the other budgets, then the seeded shuffles."""
    out = [Composition("as-run", run_tokens, None)]
    out += [Composition(f"tokens-{b}", b, None) for b in opts.batch_tokens if b != run_tokens]
    out += [Composition(f"shuffle-{opts.seed + k}", run_tokens, opts.seed + k)
            for k in range(opts.shuffles)]
    return out


def measured(sections: RunSections, variant: EncoderVariant) -> bool:
    """Whether ``variant`` gets re-encoded under several compositions in this run."""

    opts = sections.batch_sensitivity
    if opts is None or variant.name == sections.reference:
        return False
    if opts.variants is not None:
        return variant.name in opts.variants
    return declared_dependence(variant).batch_dependent


def stored_name(variant: str, composition: str) -> str:
    return f"{_STORED_PREFIX}/{variant}/{composition}"


def between_compositions(stacks: Sequence[np.ndarray]) -> dict[str, Any]:
    """Per text, the lowest cosine between any two compositions' vectors of it; then the
    mean, 1st percentile and minimum of that over texts, and the largest component
    difference (the figure the declarations' tolerance speaks of)."""
    if len(stacks) < 2 or not len(stacks[0]):
        return {"texts": len(stacks[0]) if stacks else 0, "compositions": len(stacks),
                "cosine": None, "max_abs_diff": None, "bit_identical": None}
    unit = [s / np.maximum(np.linalg.norm(s, axis=1, keepdims=True), 1e-12)
            for s in (np.asarray(x, dtype=np.float64) for x in stacks)]
    lowest = np.full(len(unit[0]), np.inf)
    max_abs = 0.0
    for i in range(len(unit)):
        for j in range(i + 1, len(unit)):
            lowest = np.minimum(lowest, np.einsum("ij,ij->i", unit[i], unit[j]))
            max_abs = max(max_abs, float(np.max(np.abs(stacks[i] - stacks[j]))))
    return {"texts": len(lowest), "compositions": len(stacks),
            "cosine": {"mean": float(lowest.mean()), "p1": float(np.percentile(lowest, 1)),
                       "min": float(lowest.min())},
            "max_abs_diff": max_abs,
            "bit_identical": all(np.array_equal(stacks[0], s) for s in stacks[1:])}


def _composition_metrics(sections: RunSections, gated: set[str], values: PerQuery,
                         ref_values: PerQuery) -> dict[str, dict[str, float]]:
    """One composition's mean of each reported (and each gated reference) measure, with
    its paired delta against the reference where both cover the same queries."""
    metrics: dict[str, dict[str, float]] = {}
    for name in [*sections.metrics, *(m for m in sections.reference_metrics if m in gated)]:
        col = column(values, name, parse_measure(name).name)
        if col is None:
            continue
        entry = {"value": float(np.nanmean(col)) if len(col) else float("nan")}
        ref_column = column(ref_values, name, parse_measure(name).name)
        if ref_column is not None and len(ref_column) == len(col):
            entry["delta"] = float(np.mean(col - ref_column))
        metrics[name] = entry
    return metrics


def apply_sensitivity(
    sections: RunSections, specs: Sequence[GateSpec], gate: VariantGate, measured_entry:
    Mapping[str, Any], folder: RunFolder, dataset: str, variant: str,
) -> tuple[dict[str, Any], VariantGate, str]:
    """Gate every composition from stored values; returns the summary section, the
    variant's gate on this dataset (worst composition under ``verdict: worst``) and the
    sentence the summary's warnings carry."""

    opts = sections.batch_sensitivity
    rule = opts.verdict if opts is not None else "worst"
    ref_values = folder.read_per_query(dataset, measured_entry["reference_stored_as"])
    rows, extra_checks, failing, undecided = [], [], [], []
    metric_values: dict[str, list[float]] = {}
    gated = {s.metric for s in specs}
    for comp in measured_entry["compositions"]:
        values = folder.read_per_query(dataset, comp["stored_as"])
        per_text = folder.read_per_text(dataset, comp["stored_as"])
        cosines = np.array([np.nan if v is None else v
                            for part in ("query", "document")
                            for v in per_text.get(part, {}).values()], dtype=np.float64)
        comp_gate = decide_gates(specs, values, ref_values, extra_values={"cosine": cosines},
                                 resamples=sections.stats.resamples, seed=sections.stats.seed)
        metrics = _composition_metrics(sections, gated, values, ref_values)
        for name, entry in metrics.items():
            metric_values.setdefault(name, []).append(entry.get("delta", entry["value"]))
        verdict = comp_gate.verdict  # too small a slice to decide is inconclusive
        rows.append({"id": comp["id"], "batch_tokens": comp["batch_tokens"],
                     "shuffle_seed": comp["shuffle_seed"], "passed": comp_gate.passed,
                     "verdict": verdict,
                     "verdicts": {c.gate: c.verdict for c in comp_gate.checks},
                     "metrics": metrics, "vectors": comp.get("vectors"),
                     "seconds": comp.get("seconds")})
        if verdict == "fail":
            failing.append(comp["id"])
        elif verdict == "inconclusive":
            undecided.append(comp["id"])
        extra_checks += [dataclasses.replace(
            c, gate=f"{c.gate} [batch composition {comp['id']} on "
                    f"{measured_entry['slice']['queries']} queries]") for c in comp_gate.checks]
    spread = {name: {"min": min(v), "max": max(v), "range": max(v) - min(v),
                     "of": "delta vs reference" if name in sections.metrics else "value"}
              for name, v in metric_values.items() if name in gated and v}
    worst = failing[0] if failing else (undecided[0] if undecided else None)
    passed_all = not failing and not undecided
    if rule == "worst":
        combined = VariantGate(gate.passed and passed_all, (*gate.checks, *extra_checks))
    else:
        combined = gate
    dependence = measured_entry.get("dependence", {})
    between = measured_entry.get("between_compositions", {})
    cos = between.get("cosine") or {}
    note = (f"{variant} on {dataset} is {dependence.get('level', 'batch-dependent')} on batch "
            f"composition: per-text cosine between {between.get('compositions')} compositions "
            f"mean {cos.get('mean', float('nan')):.6f}, min {cos.get('min', float('nan')):.6f}; "
            + ("its verdict is its worst composition's" + outcome_clause(failing, undecided)
               if rule == "worst" else "gated as run only (batch_sensitivity.verdict: as-run)"))
    section = {
        "dependence": dependence,
        "verdict_rule": "worst composition" if rule == "worst" else "as run",
        "passed_as_run": gate.passed,
        "passed_every_composition": passed_all,
        "failing_compositions": failing,
        "inconclusive_compositions": undecided,
        "worst_composition": worst,
        "slice": measured_entry.get("slice"),
        "between_compositions": between,
        "metric_range": spread,
        "compositions": rows,
        "extra_seconds": measured_entry.get("seconds"),
    }
    return section, combined, note
