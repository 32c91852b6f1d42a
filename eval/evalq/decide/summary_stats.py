"""The figures of a summary table: a mean with its interval, a paired Δ with the interval
its gate uses, and per-query values aligned on the judged queries.

One implementation for every kind of run (the embedding run, rerank pipelines, batch
sensitivity): pipelines used to compute their Δ intervals with the percentile bootstrap
whatever the recipe's ``stats.method``, so their table and their gates disagreed. These are
pure functions of arrays and the stats options (anything with ``confidence``,
``resamples``, ``seed``, ``method``: the recipe's ``stats:`` block, or a plan's copy of it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from evalq.core.gates import HISTORICAL_METHOD, GateSpec
from evalq.core.values import PerQuery
from evalq.decide import intervals, stats


class StatsSettings(Protocol):
    """What the summary figures read of the recipe's ``stats:``."""

    @property
    def confidence(self) -> float: ...

    @property
    def resamples(self) -> int: ...

    @property
    def seed(self) -> int: ...

    @property
    def method(self) -> str: ...


def mean_entry(values: np.ndarray, s: StatsSettings) -> dict[str, Any]:
    """The mean with its percentile-bootstrap interval (the table's value column)."""
    ci = stats.bootstrap_mean_ci(values, s.confidence, s.resamples, s.seed)
    return {"value": ci.mean, "ci_low": ci.ci_low, "ci_high": ci.ci_high, "n": ci.n}


def difference_interval(diffs: np.ndarray, s: StatsSettings,
                        confidence: float) -> tuple[float, float, float]:
    """(mean, low, high) of per-query differences by the recipe's interval method, the
    same interval an allowed-drop gate at ``confidence`` computes."""
    if s.method == HISTORICAL_METHOD:
        ci = stats.bootstrap_mean_ci(diffs, confidence, s.resamples, s.seed)
        return ci.mean, ci.ci_low, ci.ci_high
    iv = intervals.interval(np.asarray(diffs, dtype=np.float64), s.method, confidence,
                            s.resamples, s.seed)
    return iv.estimate, iv.low, iv.high


def paired_entry(cand: np.ndarray, ref: np.ndarray, s: StatsSettings,
                 confidence: float | None = None) -> dict[str, Any]:
    """Δ vs the reference with the interval a gate on this measure uses (its confidence,
    default the recipe's; the recipe's method), so the table and the verdict show the
    same interval."""
    confidence = s.confidence if confidence is None else confidence
    cand = np.asarray(cand, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if cand.shape != ref.shape:
        raise ValueError(f"paired values need equal lengths, got {cand.size} candidate and "
                         f"{ref.size} reference")
    delta, low, high = difference_interval(cand - ref, s, confidence)
    p_value = stats.randomization_test(cand, ref, s.resamples, s.seed)
    alpha = (1 - confidence) / 2
    return {"delta": delta, "ci_low": low, "ci_high": high, "confidence": confidence,
            "method": s.method, "p_value": p_value,
            "mde": stats.minimum_detectable_effect(cand - ref, alpha) if len(cand) > 1 else None}


def gate_confidence(specs: Sequence[GateSpec], name: str, default: float) -> float:
    """The confidence of the first allowed-drop gate on the measure whose canonical name
    is ``name`` (the caller reads it off the measure registry; a spec carries its own in
    ``column``): the Δ column shows the interval that gate decided with."""
    for spec in specs:
        if spec.max_drop is not None and (spec.column or spec.metric) == name:
            return float(spec.confidence)
    return default


def column(values: PerQuery, name: str, canonical: str) -> np.ndarray | None:
    """A measure's per-query column by the recipe's spelling (``ndcg_cut_10``) or its
    canonical name (``nDCG@10``, which the caller reads off the measure registry);
    ``None`` when it was not stored."""
    for key in (name, canonical):
        if key in values.values:
            return np.asarray(values.values[key], dtype=np.float64)
    return None


def align(values: PerQuery, query_ids: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Values per ``query_ids``: reference measures are computed per reference query,
    qrels measures per judged query; they are paired on the judged queries (a judged
    query with no row scores 0)."""
    position = {q: i for i, q in enumerate(values.query_ids)}
    idx = np.array([position.get(q, -1) for q in query_ids], dtype=np.int64)
    out = {}
    for name, col in values.values.items():
        col = np.asarray(col, dtype=np.float64)
        out[name] = (np.where(idx >= 0, col[np.maximum(idx, 0)], 0.0) if len(col)
                     else np.zeros(len(query_ids)))
    return out
