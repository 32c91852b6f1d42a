"""From stored per-query values to the summary: aggregates, paired statistics, gates.

``build_summary`` reads the per-query values back from the results folder rather than
taking them from memory, so ``evalq gate RESULTS_DIR`` (which calls the same function on a
finished folder) re-decides exactly what ``evalq run`` decided: one code path, seeded
resampling, values stored at full precision.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from evalq import stats
from evalq.config import GateConfig, Recipe
from evalq.gate import GateCheck, GateSpec, VariantGate, decide_gates, parse_max_drop
from evalq.metrics.values import PerQuery
from evalq.results import RunFolder


def gate_spec(cfg: GateConfig, default_confidence: float) -> GateSpec:
    drop, relative = (None, False)
    if cfg.max_drop is not None:
        drop, relative = parse_max_drop(cfg.max_drop)
    return GateSpec(metric=cfg.metric, against=cfg.against, max_drop=drop, relative=relative,
                    min=cfg.min, stat=cfg.stat, confidence=cfg.confidence or default_confidence)


def _mean_entry(values: np.ndarray, recipe: Recipe) -> dict[str, Any]:
    ci = stats.bootstrap_mean_ci(values, recipe.stats.confidence, recipe.stats.resamples,
                                 recipe.stats.seed)
    return {"value": ci.mean, "ci_low": ci.ci_low, "ci_high": ci.ci_high, "n": ci.n}


def _paired_entry(cand: np.ndarray, ref: np.ndarray, recipe: Recipe) -> dict[str, Any]:
    s = recipe.stats
    diff = stats.paired_bootstrap(cand, ref, s.confidence, s.resamples, s.seed)
    p_value = stats.randomization_test(cand, ref, s.resamples, s.seed)
    alpha = (1 - s.confidence) / 2
    return {"delta": diff.delta, "ci_low": diff.ci_low, "ci_high": diff.ci_high,
            "p_value": p_value,
            "mde": stats.minimum_detectable_effect(cand - ref, alpha) if len(cand) > 1 else None}


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
        gate="parity preflight (float32, same texts)",
        passed=passed,
        verdict="pass" if passed else "fail",
        reason=(f"cosine vs reference min {parity['cosine_min']:.6f}, mean "
                f"{parity['cosine_mean']:.6f} (required >= {parity['min_cosine']})"
                + ("" if passed else "; compare pooling, normalization, truncation and "
                   "prefixes between the backends")),
        figures={"cosine_min": parity["cosine_min"], "cosine_mean": parity["cosine_mean"]},
    )


def build_summary(recipe: Recipe, variants: Mapping[str, Mapping[str, Any]],
                  folder: RunFolder) -> dict[str, Any]:
    """``variants``: the manifest's per-variant entries (role, settings, backend, timings,
    parity, datasets), reference first."""
    reference = recipe.reference.name
    warnings, settings_differ = _settings_warnings(variants, reference)
    specs = [(cfg, gate_spec(cfg, recipe.stats.confidence)) for cfg in recipe.gates]
    metric_names = list(recipe.metrics)
    datasets: dict[str, Any] = {}
    verdicts: dict[str, VariantGate] = {}
    for ds_name in variants[reference]["datasets"]:
        ref_values = folder.read_per_query(ds_name, reference)
        ds_entry: dict[str, Any] = {"queries": len(ref_values.query_ids), "variants": {}}
        for name, info in variants.items():
            role = info["role"]
            ds_info = info["datasets"].get(ds_name, {})
            ds_entry["documents"] = ds_info.get("documents", ds_entry.get("documents"))
            values = ref_values if name == reference else folder.read_per_query(ds_name, name)
            entry: dict[str, Any] = {"role": role, "metrics": {}}
            for m in metric_names:
                cand = _column(values, m)
                entry["metrics"][m] = _mean_entry(cand, recipe)
                if name != reference:
                    entry["metrics"][m]["vs_reference"] = _paired_entry(
                        cand, _column(ref_values, m), recipe)
            if name != reference:
                entry["reference_metrics"] = {
                    m: _mean_entry(_column(values, m), recipe)
                    for m in recipe.reference_metrics
                }
                entry["vectors"] = ds_info.get("vectors")
                mine = [s for c, s in specs if c.variants is None or name in c.variants]
                gate = decide_gates(
                    mine, values, ref_values,
                    extra_values={"cosine": _text_cosines(folder, ds_name, name)},
                    resamples=recipe.stats.resamples, seed=recipe.stats.seed)
                parity = _parity_check(info)
                if parity is not None:
                    gate = VariantGate(gate.passed and parity.passed, (parity, *gate.checks))
                if ds_info.get("batch_sensitivity"):  # #14: gate every batch composition
                    from evalq.sensitivity import apply_sensitivity

                    entry["batch_sensitivity"], gate, note = apply_sensitivity(
                        recipe, mine, gate, ds_info["batch_sensitivity"], folder, ds_name, name)
                    warnings.append(note)
                entry["gate"] = gate.to_dict()
                previous = verdicts.get(name)
                verdicts[name] = gate if previous is None else VariantGate(
                    previous.passed and gate.passed, (*previous.checks, *gate.checks))
            entry["encode"] = ds_info.get("encode", {})
            entry["index"] = ds_info.get("index")
            ds_entry["variants"][name] = entry
        datasets[ds_name] = ds_entry
    summary_variants = {}
    for name, info in variants.items():
        backend = info.get("backend", {})
        quant = backend.get("quantization") or {}
        summary_variants[name] = {
            "role": info["role"],
            "passed": verdicts[name].passed if name in verdicts else None,
            "weight_bytes": quant.get("weight_bytes") if isinstance(quant, dict) else None,
            "settings_differ": settings_differ.get(name),
            **{k: info.get("timings", {}).get(k)
               for k in ("startup_s", "total_s", "peak_rss_mb", "children_peak_rss_mb")},
        }
    return {
        "recipe": recipe.name,
        "reference": reference,
        "passed": all(v.passed for v in verdicts.values()),
        "failed_gates": [f"{name}: {c.gate} ({c.verdict})" for name, v in verdicts.items()
                         for c in v.checks if not c.passed],
        "datasets": datasets,
        "variants": summary_variants,
        "warnings": warnings,
    }, verdicts


def _column(values: PerQuery, name: str) -> np.ndarray:
    from evalq.metrics.registry import parse_measure

    if name in values.values:
        return np.asarray(values.values[name], dtype=np.float64)
    return np.asarray(values.values[parse_measure(name).name], dtype=np.float64)
