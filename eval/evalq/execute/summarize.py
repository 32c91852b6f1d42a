"""From stored per-query values to the summary: aggregates, paired statistics, gates.

``build_summary`` reads the per-query values back from the results folder rather than
taking them from memory, so ``evalq gate RESULTS_DIR`` (which calls the same function on a
finished folder) re-decides exactly what ``evalq run`` decided: one code path, seeded
resampling, values stored at full precision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evalq.core.errors import InputError
from evalq.core.gates import (
    PREFLIGHT_LABEL,
    GateCheck,
    GateSpec,
    VariantGate,
    check_from_dict,
    outcome,
    summary_passed,
    worst_of,
)
from evalq.core.values import PerQuery
from evalq.decide.gate import decide_pooled, paired_values
from evalq.decide.summary_stats import column, mean_entry, paired_entry
from evalq.execute.losses import decide_losses, loss_pairs, loss_split
from evalq.execute.sensitivity import apply_sensitivity
from evalq.execute.sweep import sweep_summary
from evalq.measure.registry import parse_measure
from evalq.plan.gates import GateConfig, gate_spec
from evalq.plan.run import RunSections
from evalq.results import schema as rs
from evalq.results.folder import RunFolder, clean_json


def _entry_confidence(specs: list[tuple[GateConfig, GateSpec]], metric: str, variant: str,
                      default: float) -> float:
    """The confidence of the first allowed-drop gate on ``metric`` for ``variant``."""
    for cfg, spec in specs:
        if spec.max_drop is not None and _name(spec.metric) == _name(metric) and (
                cfg.variants is None or variant in cfg.variants):
            return spec.confidence
    return default


def _settings_warnings(variants: Mapping[str, Mapping[str, Any]], reference: str) -> tuple[
        list[str], dict[str, dict[str, Any]]]:
    """Mismatched encoding settings are the usual cause of "quantization broke retrieval"."""
    ref_settings = variants[reference]["settings"]
    warnings, differ = [], {}
    for name, info in variants.items():
        if name == reference:
            continue
        diff = {k: {"variant": v, "reference": ref_settings.get(k)}
                for k, v in info["settings"].items() if ref_settings.get(k) != v}
        if diff:
            differ[name] = diff
            listed = ", ".join(f"{k} {d['variant']!r} vs {d['reference']!r}"
                               for k, d in diff.items())
            warnings.append(f"{name} differs from {reference} in encoding settings other than "
                            f"quantization ({listed}): its differences are not the "
                            "quantization's alone")
    return warnings, differ


def _text_cosines(folder: RunFolder, dataset: str, variant: str) -> np.ndarray:
    per_text = folder.read_per_text(dataset, variant)
    values = [*per_text.get("query", {}).values(), *per_text.get("document", {}).values()]
    return np.array([np.nan if v is None else v for v in values], dtype=np.float64)


def _parity_check(info: Mapping[str, Any]) -> GateCheck | None:
    parity = info.get("parity") or {}
    if not parity.get("checked"):
        return None
    passed = bool(parity.get("passed"))
    return GateCheck(
        gate=f"{PREFLIGHT_LABEL} (float32, same texts)",
        passed=passed,
        verdict="pass" if passed else "fail",
        reason=(f"cosine vs reference min {parity['cosine_min']:.6f}, mean "
                f"{parity['cosine_mean']:.6f} (required >= {parity['min_cosine']})"
                + ("" if passed else "; compare pooling, normalization, truncation and "
                   "prefixes between the backends")),
        figures={"cosine_min": parity["cosine_min"], "cosine_mean": parity["cosine_mean"]},
    )


@dataclass
class _Gathered:
    """What the pass over the datasets collects for the verdicts: each candidate's
    per-dataset checks, its suite checks (the parity preflight first, then pooled gates),
    how many of those are preflights, the pooled gates' pairs by (variant, gate index) and
    the summary's warnings."""

    checks: dict[str, list[GateCheck]]
    suite_checks: dict[str, list[GateCheck]]
    preflights: dict[str, int]
    warnings: list[str]
    pooled_pairs: dict[tuple[str, int], list[tuple[str, np.ndarray, np.ndarray]]] = field(
        default_factory=dict)


def build_summary(sections: RunSections, variants: Mapping[str, Mapping[str, Any]],
                  folder: RunFolder) -> tuple[rs.RunSummary, dict[str, VariantGate]]:
    """``variants``: the manifest's per-variant entries (role, settings, backend, timings,
    parity, datasets), reference first.

    Gates with ``over: per_dataset`` are decided on each dataset (labels end in
    ``on <dataset>``); ``over: pooled`` gates once per variant over all datasets. The
    parity preflight is one check per variant, whatever the number of datasets.
    """
    reference = sections.reference
    warnings, settings_differ = _settings_warnings(variants, reference)
    specs = [(cfg, gate_spec(cfg, sections.stats.confidence, sections.stats))
             for cfg in sections.gates]
    found = _Gathered({}, {}, {}, warnings)
    for name, info in variants.items():
        if name != reference:
            parity = _parity_check(info)
            found.checks[name] = []
            found.suite_checks[name] = [] if parity is None else [parity]
            found.preflights[name] = len(found.suite_checks[name])
    datasets = {ds_name: _dataset_entry(sections, specs, variants, folder, ds_name, found)
                for ds_name in variants[reference]["datasets"]}
    suite_checks = found.suite_checks
    for (name, i), pairs in found.pooled_pairs.items():
        suite_checks[name].append(decide_pooled(specs[i][1], pairs,
                                                resamples=sections.stats.resamples,
                                                seed=sections.stats.seed))
    # Gated: a per-dataset, sensitivity or pooled gate applies. The parity preflight is
    # checked first (suite_checks[name][0]) but alone it certifies nothing.
    verdicts = {name: VariantGate(all(c.passed for c in (*suite_checks[name], *mine)),
                                  (*suite_checks[name], *mine),
                                  gated=bool(mine) or len(suite_checks[name])
                                  > found.preflights[name])
                for name, mine in found.checks.items()}
    summary_variants = {
        name: _summary_variant(info, settings_differ.get(name), verdicts.get(name),
                               suite_checks.get(name))
        for name, info in variants.items()}
    return rs.RunSummary(
        schema_version=rs.SCHEMA_VERSION,
        recipe=sections.recipe,
        reference=reference,
        passed=all(v.passed for v in verdicts.values()),
        failed_gates=[f"{name}: {c.gate} ({c.verdict})" for name, v in verdicts.items()
                      for c in v.checks if not c.passed],
        stats=rs.StatsPart(method=sections.stats.method, min_nonzero=sections.stats.min_nonzero,
                           confidence=sections.stats.confidence,
                           resamples=sections.stats.resamples, seed=sections.stats.seed),
        suite=rs.SuitePart(datasets=list(datasets),
                           gates=[rs.SuiteGate(gate=s.label, over=s.over) for _, s in specs]),
        datasets=datasets,
        variants=summary_variants,
        warnings=warnings,
    ), verdicts


def _dataset_entry(sections: RunSections, specs: list[tuple[GateConfig, GateSpec]],
                   variants: Mapping[str, Mapping[str, Any]], folder: RunFolder, ds_name: str,
                   found: _Gathered) -> rs.DatasetSummary:
    """One dataset's summary entry: every variant's metrics, a candidate's gates (its
    checks and pooled pairs land in ``found``)."""
    reference = sections.reference
    ref_values = folder.read_per_query(ds_name, reference)
    documents: int | None = None
    entries: dict[str, rs.VariantDatasetEntry] = {}
    for name, info in variants.items():
        ds_info = info["datasets"].get(ds_name, {})
        documents = ds_info.get("documents", documents)
        values = ref_values if name == reference else folder.read_per_query(
            ds_name, name, like=ref_values)
        metrics: dict[str, rs.MetricEntry] = {}
        for m in sections.metrics:
            cand = _column(values, m, folder, ds_name, name)
            mean = clean_json(mean_entry(cand, sections.stats))
            if name == reference:
                metrics[m] = rs.MetricEntry(**mean)
                continue
            metrics[m] = rs.MetricEntry(**mean, vs_reference=rs.PairedEntry(**clean_json(
                paired_entry(cand, _column(ref_values, m, folder, ds_name, reference),
                             sections.stats,
                             _entry_confidence(specs, m, name, sections.stats.confidence)))))
        parts: dict[str, Any] = {}
        if name != reference:
            gate, parts = _candidate_gate(sections, specs, folder, ds_name, name, ds_info,
                                          values, ref_values, found)
            found.checks[name].extend(gate.checks)
        entries[name] = rs.VariantDatasetEntry(
            role=info["role"], metrics=metrics, **parts,
            encode=rs.EncodeSection.model_validate(clean_json(ds_info.get("encode", {}))),
            index=clean_json(ds_info.get("index")))
    return rs.DatasetSummary(queries=len(ref_values.query_ids), variants=entries,
                             documents=documents)


def _candidate_gate(sections: RunSections, specs: list[tuple[GateConfig, GateSpec]],
                    folder: RunFolder, ds_name: str, name: str,
                    ds_info: Mapping[str, Any], values: PerQuery, ref_values: PerQuery,
                    found: _Gathered) -> tuple[VariantGate, dict[str, Any]]:
    """A candidate on one dataset: its per-dataset gates (batch sensitivity folded in),
    and its entry's parts (reference metrics, vectors, gate, batch sensitivity); its
    pooled gates' pairs into ``found``."""
    entry: dict[str, Any] = {
        "reference_metrics": {
            m: rs.MeanEntry(**clean_json(mean_entry(_column(values, m, folder, ds_name, name),
                                                    sections.stats)))
            for m in sections.reference_metrics},
        "vectors": None if ds_info.get("vectors") is None else
        rs.VectorFidelity.model_validate(clean_json(ds_info["vectors"]))}
    mine = [(i, s) for i, (c, s) in enumerate(specs)
            if c.variants is None or name in c.variants]
    pairs = loss_pairs(folder, ds_name, name, values, ref_values)  # issue 30
    losses = loss_split(sections.metrics, sections.reference_metrics, pairs)
    if losses is not None:  # a variant searched through an index only
        entry["losses"] = losses
    cosines = {"cosine": _text_cosines(folder, ds_name, name)}
    per_dataset = [s for _, s in mine if s.over == "per_dataset"]
    gate = decide_losses(per_dataset, pairs, extra_values=cosines,
                         resamples=sections.stats.resamples, seed=sections.stats.seed)
    swept = (ds_info.get("index") or {}).get("sweep")
    if swept:  # issue 30: each swept value gated apart; the verdict stays the variant's
        entry["sweep"] = sweep_summary(per_dataset, pairs, folder, ds_name, name, swept,
                                       ref_values, extra_values=cosines,
                                       resamples=sections.stats.resamples,
                                       seed=sections.stats.seed)
    if ds_info.get("batch_sensitivity"):  # #14: gate every batch composition
        section, gate, note = apply_sensitivity(
            sections, [s for _, s in mine if s.over == "per_dataset"], gate,
            ds_info["batch_sensitivity"], folder, ds_name, name)
        entry["batch_sensitivity"] = rs.SensitivitySection.model_validate(clean_json(section))
        found.warnings.append(note)
    gate = VariantGate(gate.passed, tuple(
        GateCheck(f"{c.gate} on {ds_name}", c.passed, c.verdict, c.reason,
                  {**c.figures, "dataset": ds_name}) for c in gate.checks))
    entry["gate"] = rs.GateResult(passed=gate.passed,
                                  checks=[_stored(c) for c in gate.checks])
    for i, s in mine:
        pair = pairs[s.loss]
        if s.over == "pooled" and pair is not None:
            cand, ref = paired_values(s, *pair)
            found.pooled_pairs.setdefault((name, i), []).append((ds_name, cand, ref))
    return gate, entry


def _summary_variant(info: Mapping[str, Any], settings_differ: Any, verdict: VariantGate | None,
                     suite_checks: list[GateCheck] | None) -> rs.VariantSummary:
    """One variant's summary entry: its verdict (candidates) and costs."""
    quant = info.get("backend", {}).get("quantization") or {}
    timings = info.get("timings", {})
    extra: dict[str, Any] = {}
    if verdict is not None:
        extra["verdict"] = verdict.verdict
    if suite_checks is not None:
        # Checks that belong to the variant, not to one dataset: parity, pooled gates.
        extra["suite_checks"] = [_stored(c) for c in suite_checks]
    return rs.VariantSummary(
        role=info["role"],
        passed=summary_passed(verdict.verdict) if verdict is not None else None,
        weight_bytes=quant.get("weight_bytes") if isinstance(quant, dict) else None,
        settings_differ=clean_json(settings_differ),
        **{k: clean_json(timings.get(k))
           for k in ("startup_s", "total_s", "peak_rss_mb", "children_peak_rss_mb",
                     "peak_rss_method")},
        **extra)


def _stored(check: GateCheck) -> rs.GateCheck:
    """A decided check as the summary stores it (non-finite figures as null)."""
    return rs.GateCheck.model_validate(check.to_dict())


def with_pipelines(summary: rs.RunSummary, pipelines: Mapping[str, Mapping[str, Any]],
                   passed: bool, failed_gates: list[str] | None = None) -> rs.RunSummary:
    """``summary`` with the pipelines' results (each typed as a ``PipelineSummary``), their
    verdict folded into ``passed`` and, where given, their failed gates listed, then
    :func:`add_pipeline_gates` applied."""
    typed = {name: rs.PipelineSummary.model_validate(clean_json(p))
             for name, p in pipelines.items()}
    update: dict[str, Any] = {"pipelines": typed,
                              "passed": summary.passed and passed}
    if failed_gates is not None:
        update["failed_gates"] = [*summary.failed_gates, *failed_gates]
    return add_pipeline_gates(summary.model_copy(update=update))


def add_pipeline_gates(summary: rs.RunSummary) -> rs.RunSummary:
    """Fold the pipeline gates that apply to a dense candidate into its verdict: those on
    combinations where it is the first stage under the reference reranker (``kind:
    retriever``), the only ones that judge it alone. Its checks land in the variant's
    ``pipeline_checks``; a candidate with no gate of its own is gated by them."""
    variants = summary.variants
    found: dict[str, list[rs.GateCheck]] = {}
    for pipe, p in (summary.pipelines or {}).items():
        for ds, d in p.datasets.items():
            for at_depth in d.depths.values():
                for combo, entry in at_depth.combinations.items():
                    info = variants.get(entry.first_stage)
                    if entry.kind != "retriever" or info is None or info.role != "candidate":
                        continue
                    found.setdefault(entry.first_stage, []).extend(
                        c.model_copy(update={"gate": f"pipeline {pipe} {combo}: {c.gate} "
                                                     f"on {ds}"})
                        for c in (entry.gate.checks if entry.gate is not None else []))
    changed = dict(variants)
    for name, checks in found.items():
        if not checks:
            continue
        info = variants[name]
        judged = outcome([check_from_dict(c.model_dump()) for c in checks], gated=True)
        verdict = worst_of([info.verdict or "ungated", judged])
        changed[name] = info.model_copy(update={"verdict": verdict,
                                                "passed": summary_passed(verdict),
                                                "pipeline_checks": checks})
    return summary.model_copy(update={"variants": changed})


def _name(metric: str) -> str:
    return parse_measure(metric).name


def _column(values: PerQuery, name: str, folder: RunFolder, dataset: str,
            variant: str) -> np.ndarray:
    found = column(values, name, _name(name))
    if found is None:  # evalq gate on an edited folder: bad input (exit 2)
        raise InputError(message=f"no per-query {name} stored",
                         file=folder.root / "per_query" / dataset / f"{variant}.jsonl",
                         fix="rerun 'evalq run'; the file was edited or the recipe's "
                         "metrics were changed after the run")
    return found
