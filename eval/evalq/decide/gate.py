"""Gates: pure functions from per-query values and thresholds to a verdict.

A gate is data in the recipe (:class:`GateSpec`). Deciding needs only the stored
per-query values, and every resampling is seeded, so ``evalq gate RESULTS_DIR``
re-decides exactly what ``evalq run`` decided.

Two kinds of gate:

**Allowed drop** (``against: qrels``, ``max_drop``): a non-inferiority test on the paired
per-query differences d = candidate − reference. The margin is ``max_drop`` (absolute)
or ``max_drop × mean(reference)`` (relative, ``"1%"``). With the interval [ci_low,
ci_high] of mean(d) at ``confidence`` by the recipe's ``stats.method`` (default
studentized bootstrap, chosen by ``bench/calibration.py``; see ``evalq.decide.intervals``):

* ``pass``          ci_low >= −margin (the drop is shown to be within the margin);
* ``fail``          mean(d) < −margin (the observed drop already exceeds the margin);
* ``inconclusive``  otherwise: the point estimate is within the margin but the interval
  reaches past it. More queries would decide; the reason gives the minimum detectable
  effect for this query count, the queries needed if the observed difference held, and
  the queries that would certify the margin at the observed spread if the true
  difference were 0. Inconclusive fails the gate: an unproven candidate does not ship.

Sparse data: with fewer than ``min_nonzero`` non-zero differences no interval decides.
The exact bound takes over (differences of measures in [0, 1] are >= −1, so the mean
drop is at most the Clopper–Pearson upper bound of the share of queries that differ):
identical runs pass once there are enough queries, everything else is inconclusive.
Percentile with ``min_nonzero: 0`` is the historical rule (results written before
methods existed are re-decided with it).

Over a suite (``over: pooled``) the same rule runs on the macro-average of per-dataset
mean differences with a bootstrap stratified by dataset (:func:`decide_pooled`).

This is not "no significant difference": a noisy candidate cannot pass by being
indistinguishable from the reference, it must be shown to be close.

**Floor** (``min``): the candidate's value must be at least ``min``. With ``stat: mean``
the test is on the lower bound of the percentile-bootstrap interval of the mean of
per-query values (pass: ci_low >= min; fail: mean < min; inconclusive otherwise). With
``stat: p1`` or ``stat: min`` the plain statistic over the values is compared (1st
percentile by numpy's linear interpolation, or the minimum): these describe the worst
texts, not an average, so they need no interval. Floors suit reference measures
(``overlap@10 >= 0.9``, ``cosine p1 >= 0.99``); they are also accepted on qrels measures.

Common rules: a NaN among the values fails the gate (a broken query is reported, never
averaged away); no values, or values that are all NaN (nothing was measured: a fidelity
measure over zero scored pairs), is inconclusive; with varying values and fewer than
:data:`MIN_QUERIES` queries the interval is not trusted and a pass becomes inconclusive
(a percentile bootstrap underestimates the spread of tiny samples by (n−1)/n and takes
few distinct values). Floors, and drops under the historical rule, decide constant values
(e.g. identical runs) by that constant for any n >= 1; the sparse-data rule decides them
otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from evalq.core.errors import InputError
from evalq.core.gates import HISTORICAL_METHOD, Figure, GateCheck, GateSpec, VariantGate
from evalq.core.values import PerQuery
from evalq.decide import stats
from evalq.decide.drop_evidence import (
    MIN_QUERIES,
    POWER,
    DropEvidence,
    drop_evidence,
    drop_figures,
)


def _fmt(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else str(value)


def _nan_check(spec: GateSpec, arrays: Mapping[str, np.ndarray]) -> GateCheck | None:
    bad = {name: int(np.count_nonzero(np.isnan(a))) for name, a in arrays.items()}
    bad = {name: count for name, count in bad.items() if count}
    if not bad:
        return None
    figures: dict[str, Figure] = {"nan_" + name: count for name, count in bad.items()}
    if all(a.size and bad.get(name) == a.size for name, a in arrays.items()):
        # Nothing was measured (a fidelity measure over zero scored pairs): undecided.
        where = ", ".join(f"{count} {name}" for name, count in bad.items())
        return GateCheck(
            spec.label, False, "inconclusive",
            f"no defined per-query values (all {where} values are undefined, NaN): nothing "
            "was measured, e.g. no pairs were scored because the first stage returned no "
            "candidates; the gate is undecided", figures)
    where = ", ".join(f"{count} {name}" for name, count in bad.items())
    return GateCheck(
        spec.label,
        False,
        "fail",
        f"undefined (NaN) per-query values: {where}; a broken query fails the gate",
        figures,
    )


def decide(
    spec: GateSpec,
    candidate_values: np.ndarray,
    reference_values: np.ndarray | None = None,
    *,
    resamples: int = 10_000,
    seed: int = 0,
) -> GateCheck:
    """Decide one gate from per-query values (see the module docstring for the rules).

    For an allowed-drop gate ``candidate_values[i]`` and ``reference_values[i]`` must be
    the same query's values. A floor looks at ``candidate_values`` only (for ``cosine``
    with ``stat: p1``/``min`` the caller may pass query and document cosines together);
    ``reference_values`` is then ignored.
    """
    cand = np.asarray(candidate_values, dtype=np.float64).ravel()
    if spec.max_drop is not None:
        if reference_values is None:
            raise ValueError(f"{spec.label}: an allowed-drop gate needs the reference's values")
        ref = np.asarray(reference_values, dtype=np.float64).ravel()
        if ref.shape != cand.shape:
            raise ValueError(
                f"{spec.label}: {cand.size} candidate values vs {ref.size} reference values; "
                "pair them by query id first"
            )
        return _decide_drop(spec, cand, ref, resamples, seed)
    return _decide_floor(spec, cand, resamples, seed)


def drop_outcome(
    delta: np.ndarray,
    low: np.ndarray,
    n: np.ndarray,
    nonzero: np.ndarray,
    constant: np.ndarray,
    margin: np.ndarray | float,
    min_nonzero: int,
    sparse_low: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """The allowed-drop rule, vectorized (the calibration harness runs this same code on
    thousands of simulated gates). Returns (passed, failed); neither is inconclusive.

    With ``min_nonzero`` > 0, fewer non-zero differences than that are decided by the
    sparse-data bound ``sparse_low`` (exact, see ``intervals``) instead of the interval.
    With ``min_nonzero`` == 0 (the historical rule) constant differences are decided by
    their constant at any n, and other samples need ``MIN_QUERIES`` queries.
    """
    sparse = nonzero < min_nonzero
    trusted = (n >= MIN_QUERIES) | (constant & (min_nonzero == 0))
    bound = np.where(sparse, sparse_low, low)
    passed = (bound >= -margin) & (trusted | sparse)
    failed = ~passed & (delta < -margin)
    return passed, failed


def _decide_drop(
    spec: GateSpec, cand: np.ndarray, ref: np.ndarray, resamples: int, seed: int
) -> GateCheck:
    return _decide_drop_strata(spec, spec.label, [cand], [ref], resamples, seed)


def _decide_drop_strata(
    spec: GateSpec, label: str, cands: Sequence[np.ndarray], refs: Sequence[np.ndarray],
    resamples: int, seed: int,
) -> GateCheck:
    assert spec.max_drop is not None
    cand_all, ref_all = np.concatenate(cands), np.concatenate(refs)
    broken = _nan_check(spec, {"candidate": cand_all, "reference": ref_all})
    if broken:
        return GateCheck(label, broken.passed, broken.verdict, broken.reason, broken.figures)
    n = int(cand_all.size)
    if n == 0 or any(c.size == 0 for c in cands):
        return GateCheck(label, False, "inconclusive", "no queries to compare", {"n": n})
    ev = drop_evidence(spec, cands, refs, resamples, seed)
    figures = drop_figures(spec, ev, resamples, seed)
    if len(cands) > 1:
        figures["over"] = "pooled"
        figures["datasets"] = len(cands)
    return _drop_check(spec, label, ev, figures)


def _drop_check(spec: GateSpec, label: str, ev: DropEvidence,
                figures: dict[str, Figure]) -> GateCheck:
    """The allowed-drop verdict (``drop_outcome``'s rule) and the sentence that explains it."""
    n, delta, margin, nonzero, sparse_low = ev.n, ev.delta, ev.margin, ev.nonzero, ev.sparse_low
    passed, failed = drop_outcome(
        np.array([delta]), np.array([ev.ci_low]), np.array([n]), np.array([nonzero]),
        np.array([ev.constant]), margin, spec.min_nonzero, np.array([sparse_low]))
    pct = f"{spec.confidence * 100:g}%"
    where = (
        f"Δ={_fmt(delta)} ({pct} {spec.method} CI [{_fmt(ev.ci_low)}, {_fmt(ev.ci_high)}], "
        f"n={n}) vs margin −{_fmt(margin)}"
    )
    sparse = nonzero < spec.min_nonzero
    sparse_text = (
        f"only {nonzero} of {n} per-query differences are non-zero (an interval needs "
        f"{spec.min_nonzero}); exact bound: at most {_fmt(-sparse_low)} of queries differ, "
        f"so the drop is at most {_fmt(-sparse_low)}"
    )
    if passed[0]:
        head = (f"non-inferior: {sparse_text} <= {_fmt(margin)}; " if sparse else
                f"non-inferior: lower bound {_fmt(ev.ci_low)} >= −{_fmt(margin)}; ")
        return GateCheck(label, True, "pass", head + where, figures)
    if failed[0]:
        return GateCheck(
            label,
            False,
            "fail",
            f"dropped beyond the margin: Δ={_fmt(delta)} < −{_fmt(margin)}; " + where,
            figures,
        )
    if n < MIN_QUERIES:
        head = f"too few queries to trust an interval (n={n} < {MIN_QUERIES})"
    elif sparse:
        head = sparse_text + f" > {_fmt(margin)}"
    else:
        head = "the interval reaches past the margin"
    return GateCheck(
        label, False, "inconclusive",
        _inconclusive_text(head, where, n, ev.mde, ev.needed, ev.certify), figures,
    )


def _inconclusive_text(head: str, where: str, n: int, mde: float, needed: int | None,
                       certify: int | None) -> str:
    text = f"inconclusive: {head}; {where}; minimum detectable effect at n={n}: {_fmt(mde)}"
    if needed is not None:
        text += (f"; about {needed} queries would decide if the observed difference held "
                 "(computed from the observed Δ)")
    if certify is not None:
        text += (f"; about {certify} would certify the margin at the observed spread if the "
                 "true difference were 0")
    return text


def decide_pooled(
    spec: GateSpec,
    pairs: Sequence[tuple[str, np.ndarray, np.ndarray]],
    *,
    resamples: int = 10_000,
    seed: int = 0,
) -> GateCheck:
    """One verdict over a suite: the macro-average over datasets of the mean paired
    difference, its interval from a bootstrap stratified by dataset (queries resampled
    within their dataset, so every dataset weighs the same in every resample).
    ``pairs``: (dataset, candidate values, reference values), paired by query."""
    names = [name for name, _, _ in pairs]
    label = f"{spec.label} pooled over {', '.join(names)}"
    cands = [np.asarray(c, dtype=np.float64).ravel() for _, c, _ in pairs]
    refs = [np.asarray(r, dtype=np.float64).ravel() for _, _, r in pairs]
    return _decide_drop_strata(spec, label, cands, refs, resamples, seed)


def _decide_floor(spec: GateSpec, cand: np.ndarray, resamples: int, seed: int) -> GateCheck:
    assert spec.min is not None
    floor = float(spec.min)
    broken = _nan_check(spec, {"candidate": cand})
    if broken:
        return broken
    n = int(cand.size)
    if n == 0:
        return GateCheck(spec.label, False, "inconclusive", "no values to check", {"n": 0})
    if spec.stat != "mean":
        return _decide_floor_stat(spec, cand, floor)
    # Floors keep the percentile bootstrap: the calibration covers allowed-drop gates, and
    # a studentized interval opens to -inf on values that are almost all 1.0 (overlap@10
    # of a near-lossless candidate), where resamples have no spread.
    ci = stats.bootstrap_mean_ci(cand, spec.confidence, resamples, seed)
    alpha = (1.0 - spec.confidence) / 2.0
    mde = stats.minimum_detectable_effect(cand, alpha, POWER)
    needed = stats.queries_needed(ci.sd, ci.mean - floor, alpha, POWER)
    if needed is not None:
        needed = max(needed, MIN_QUERIES)
    constant = bool(np.all(cand == cand[0]))
    figures: dict[str, Figure] = {
        "n": n,
        "mean": ci.mean,
        "ci_low": ci.ci_low,
        "ci_high": ci.ci_high,
        "confidence": spec.confidence,
        "method": HISTORICAL_METHOD,
        "min": floor,
        "sd": ci.sd,
        "mde": mde,
        "power": POWER,
        "queries_needed": needed,
        "resamples": resamples,
        "seed": seed,
    }
    pct = f"{spec.confidence * 100:g}%"
    where = (f"mean={_fmt(ci.mean)} ({pct} percentile CI [{_fmt(ci.ci_low)}, "
             f"{_fmt(ci.ci_high)}], n={n})")
    if ci.ci_low >= floor and (constant or n >= MIN_QUERIES):
        return GateCheck(
            spec.label,
            True,
            "pass",
            f"lower bound {_fmt(ci.ci_low)} >= {_fmt(floor)}; " + where,
            figures,
        )
    if ci.mean < floor:
        return GateCheck(
            spec.label,
            False,
            "fail",
            f"below the floor: mean {_fmt(ci.mean)} < {_fmt(floor)}; " + where,
            figures,
        )
    return GateCheck(
        spec.label,
        False,
        "inconclusive",
        _inconclusive_text(
            f"too few queries to trust an interval (n={n} < {MIN_QUERIES})" if n < MIN_QUERIES
            else f"the interval reaches past the floor {_fmt(floor)}",
            where, n, mde, needed, None),
        figures,
    )


def _decide_floor_stat(spec: GateSpec, cand: np.ndarray, floor: float) -> GateCheck:
    """A floor on the 1st percentile or the minimum: decided by the value itself (a
    statistic of the observed values, no interval)."""
    n = int(cand.size)
    value = float(np.percentile(cand, 1.0)) if spec.stat == "p1" else float(cand.min())
    figures: dict[str, Figure] = {"n": n, "value": value, "min": floor, "stat": spec.stat}
    if value >= floor:
        return GateCheck(
            spec.label,
            True,
            "pass",
            f"{spec.stat}={_fmt(value)} >= {_fmt(floor)} over {n} values",
            figures,
        )
    below = int(np.count_nonzero(cand < floor))
    figures["below_floor"] = below
    return GateCheck(
        spec.label,
        False,
        "fail",
        f"{spec.stat}={_fmt(value)} < {_fmt(floor)} over {n} values ({below} below the floor)",
        figures,
    )


def decide_variant(checks: Sequence[GateCheck]) -> VariantGate:
    """A variant passes when every one of its gates passes (no gates: nothing failed,
    and its verdict is ``ungated``)."""
    return VariantGate(all(c.passed for c in checks), tuple(checks), gated=bool(checks))


def _values_for(spec: GateSpec, per_query: PerQuery, role: str) -> np.ndarray:
    if spec.metric in per_query.values:
        return per_query.values[spec.metric]
    name = spec.column or spec.metric  # "ndcg_cut_10" -> "nDCG@10" (evalq.plan.gates.gate_spec)
    if name not in per_query.values:
        raise InputError(
            message=f"gate on {spec.metric}: the {role} results hold no per-query values for "
            f"{name} (they hold: {', '.join(sorted(per_query.values)) or 'nothing'})",
            field="gates.metric",
            fix=f"add {name} to the recipe's metrics, or remove the gate",
        )
    return per_query.values[name]


def _paired(
    spec: GateSpec, candidate: PerQuery, reference: PerQuery
) -> tuple[np.ndarray, np.ndarray]:
    cand = _values_for(spec, candidate, "candidate")
    ref = _values_for(spec, reference, "reference")
    if candidate.query_ids == reference.query_ids:
        return cand, ref
    if set(candidate.query_ids) != set(reference.query_ids):
        only = set(candidate.query_ids) ^ set(reference.query_ids)
        raise ValueError(
            f"{spec.label}: candidate and reference were scored on different queries "
            f"({len(only)} differ, e.g. {sorted(only)[0]!r}); every qrels query gets a value"
        )
    row_of = {q: i for i, q in enumerate(reference.query_ids)}
    order = np.array([row_of[q] for q in candidate.query_ids], dtype=np.int64)
    return cand, ref[order]


def paired_values(
    spec: GateSpec, candidate: PerQuery, reference: PerQuery
) -> tuple[np.ndarray, np.ndarray]:
    """The gate's measure for candidate and reference, paired by query id."""
    return _paired(spec, candidate, reference)


def decide_gates(
    specs: Sequence[GateSpec],
    candidate: PerQuery,
    reference: PerQuery | None,
    *,
    extra_values: Mapping[str, np.ndarray] | None = None,
    resamples: int = 10_000,
    seed: int = 0,
) -> VariantGate:
    """Decide all gates of one variant from stored per-query values.

    ``candidate`` holds the variant's per-query values by measure name (qrels measures
    and reference measures together, or merged by the caller); ``reference`` the
    reference variant's qrels measures over the same queries (paired by query id).
    ``extra_values`` overrides the values a floor with stat p1/min sees, by metric name
    (e.g. ``{"cosine": query_and_document_cosines}``).
    """
    checks = []
    for spec in specs:
        if spec.max_drop is not None:
            if reference is None:
                raise ValueError(f"{spec.label}: no reference values to compare with")
            cand, ref = _paired(spec, candidate, reference)
            checks.append(decide(spec, cand, ref, resamples=resamples, seed=seed))
            continue
        values = None
        if extra_values is not None and spec.stat != "mean":
            values = extra_values.get(spec.metric)
        if values is None:
            values = _values_for(spec, candidate, "candidate")
        checks.append(decide(spec, values, resamples=resamples, seed=seed))
    return decide_variant(checks)

