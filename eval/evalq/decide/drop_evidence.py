"""What an allowed-drop gate measures: the paired difference and its interval (by the
gate's method), the margin, the sparse-data bound, the minimum detectable effect and the
queries that would decide, and the figures the results store. The verdict read off this
evidence is ``evalq.decide.gate``'s; the constants of the rule live here so both read them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from evalq.core.gates import HISTORICAL_METHOD, Figure, GateSpec
from evalq.decide import intervals, stats

MIN_QUERIES = 10
"""Fewer varying values than this cannot pass a gate that needs an interval."""

POWER = 0.8
"""Power at which the minimum detectable effect and the queries needed are reported."""


def _drop_interval(
    spec: GateSpec, diffs: Sequence[np.ndarray], cand: Sequence[np.ndarray],
    ref: Sequence[np.ndarray], resamples: int, seed: int,
) -> tuple[float, float, float, float]:
    """(delta, ci_low, ci_high, sd); one array keeps the historical percentile numbers."""
    if spec.method == HISTORICAL_METHOD and len(diffs) == 1:
        d = stats.paired_bootstrap(cand[0], ref[0], spec.confidence, resamples, seed)
        return d.delta, d.ci_low, d.ci_high, d.sd
    iv = intervals.interval(list(diffs), spec.method, spec.confidence, resamples, seed)
    sd = iv.se * math.sqrt(iv.n) if math.isfinite(iv.se) else math.nan
    return iv.estimate, iv.low, iv.high, sd


@dataclass(frozen=True)
class DropEvidence:
    """What one allowed-drop gate measured; the figures and the verdict are read off it."""

    n: int
    reference_mean: float
    candidate_mean: float
    delta: float
    ci_low: float
    ci_high: float
    sd: float
    margin: float
    nonzero: int
    constant: bool
    sparse_low: float
    mde: float
    needed: int | None
    certify: int | None
    p_value: float | None


def drop_evidence(
    spec: GateSpec, cands: Sequence[np.ndarray], refs: Sequence[np.ndarray],
    resamples: int, seed: int,
) -> DropEvidence:
    """The paired difference, its interval, the sparse-data bound and the query counts."""
    assert spec.max_drop is not None
    cand_all, ref_all = np.concatenate(cands), np.concatenate(refs)
    n = int(cand_all.size)
    diffs = [c - r for c, r in zip(cands, refs)]
    delta, ci_low, ci_high, sd = _drop_interval(spec, diffs, cands, refs, resamples, seed)
    reference_mean = float(np.mean([r.mean() for r in refs]))
    candidate_mean = float(np.mean([c.mean() for c in cands]))
    margin = spec.max_drop * reference_mean if spec.relative else spec.max_drop
    alpha = (1.0 - spec.confidence) / 2.0
    all_diffs = np.concatenate(diffs)
    mde = stats.minimum_detectable_effect(all_diffs, alpha, POWER)
    nonzero = int(np.count_nonzero(all_diffs))
    constant = bool(np.all(all_diffs == all_diffs[0]))
    # The sparse-data bound: each difference is >= -1, so the (macro-)mean drop is at most
    # the share of queries that differ; Bonferroni over datasets keeps it exact.
    per = [intervals.nonzero_rate_bound(int(np.count_nonzero(d)), d.size, alpha / len(diffs))
           for d in diffs]
    sparse_low = -float(np.mean(per))
    needed = _queries_needed(spec, sd, delta + margin, alpha, nonzero, n)
    certify = _queries_needed(spec, sd, margin, alpha, nonzero, n)
    if nonzero == 0 and spec.min_nonzero > 0:
        # identical on every query: only the exact sparse-data bound can certify
        certify = needed = intervals.queries_to_certify_identical(margin, alpha)
    p_value = stats.randomization_test(cand_all, ref_all, resamples, seed) \
        if len(cands) == 1 else None
    return DropEvidence(
        n=n, reference_mean=reference_mean, candidate_mean=candidate_mean, delta=delta,
        ci_low=ci_low, ci_high=ci_high, sd=sd, margin=margin, nonzero=nonzero,
        constant=constant, sparse_low=sparse_low, mde=mde, needed=needed, certify=certify,
        p_value=p_value,
    )


def drop_figures(spec: GateSpec, ev: DropEvidence, resamples: int, seed: int
                  ) -> dict[str, Figure]:
    """The stored figures of an allowed-drop check (results contract: keys and order)."""
    return {
        "n": ev.n,
        "reference_mean": ev.reference_mean,
        "candidate_mean": ev.candidate_mean,
        "delta": ev.delta,
        "ci_low": ev.ci_low,
        "ci_high": ev.ci_high,
        "confidence": spec.confidence,
        "method": spec.method,
        "margin": ev.margin,
        "max_drop": spec.max_drop,
        "relative": spec.relative,
        "p_value": ev.p_value,
        "sd_diff": ev.sd,
        "nonzero": ev.nonzero,
        "min_nonzero": spec.min_nonzero,
        "sparse_low": ev.sparse_low if ev.nonzero < spec.min_nonzero else None,
        "mde": ev.mde,
        "power": POWER,
        "queries_needed": ev.needed,
        "queries_to_certify": ev.certify,
        "resamples": resamples,
        "seed": seed,
    }


def _queries_needed(spec: GateSpec, sd: float, effect: float, alpha: float, nonzero: int,
                    n: int) -> int | None:
    """Queries a pass would need: the normal-approximation count, never below what the
    gate itself demands (MIN_QUERIES, and enough queries to expect ``min_nonzero``
    non-zero differences at the observed rate)."""
    needed = stats.queries_needed(sd, effect, alpha, POWER)
    if needed is None:
        return None
    floor = MIN_QUERIES
    if spec.min_nonzero and nonzero:
        floor = max(floor, math.ceil(spec.min_nonzero * n / nonzero))
    return max(needed, floor)

