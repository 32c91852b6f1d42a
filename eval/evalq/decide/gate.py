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
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

from evalq.core.errors import InputError
from evalq.core.values import PerQuery
from evalq.decide import intervals, stats
from evalq.measure.measures import FAMILIES, Measure
from evalq.measure.registry import parse_measure

if TYPE_CHECKING:  # the recipe schema is read, never imported: config imports this module
    from evalq.recipe.schema import GateConfig, StatsOptions

Against = Literal["qrels", "reference"]
Stat = Literal["mean", "p1", "min"]
Over = Literal["per_dataset", "pooled"]
Verdict = Literal["pass", "fail", "inconclusive"]
Outcome = Literal["pass", "fail", "inconclusive", "ungated"]
"""A candidate's verdict: ``ungated`` when no gate applies to it (never ``pass``)."""

MIN_QUERIES = 10
"""Fewer varying values than this cannot pass a gate that needs an interval."""

POWER = 0.8
"""Power at which the minimum detectable effect and the queries needed are reported."""

Figure = float | int | bool | str | None


@dataclass(frozen=True)
class GateSpec:
    """One gate from the recipe. Build drops with :func:`parse_max_drop`."""

    metric: str
    against: Against
    max_drop: float | None = None
    relative: bool = False
    min: float | None = None
    stat: Stat = "mean"
    confidence: float = 0.95
    # How the interval is computed and when sparse data decide instead (intervals.py).
    method: str = intervals.DEFAULT_METHOD
    min_nonzero: int = intervals.DEFAULT_MIN_NONZERO
    # Over a suite of datasets: every dataset on its own, or one macro-averaged verdict.
    over: Over = "per_dataset"

    def __post_init__(self) -> None:
        def bad(message: str, fix: str, where: str = "gates") -> InputError:
            return InputError(message=f"gate on {self.metric}: {message}", field=where, fix=fix)

        if self.against not in ("qrels", "reference"):
            raise bad(
                f"against must be qrels or reference, got {self.against!r}",
                "write against: qrels or against: reference",
                "gates.against",
            )
        if (self.max_drop is None) == (self.min is None):
            raise bad(
                "give exactly one of max_drop and min",
                "write max_drop: 1% (allowed drop) or min: 0.9 (floor), not both",
            )
        if self.max_drop is not None:
            if self.against == "reference":
                raise bad(
                    "max_drop needs a reference value to drop from; a measure against the "
                    "reference run has none (the reference scores itself 1.0)",
                    "use a floor instead, e.g. {metric: overlap@10, against: reference, min: 0.9}",
                    "gates.max_drop",
                )
            if not (math.isfinite(self.max_drop) and self.max_drop >= 0.0):
                raise bad(
                    f"max_drop must be a finite number >= 0, got {self.max_drop}",
                    "write max_drop: 0.01 (absolute) or max_drop: 1% (relative)",
                    "gates.max_drop",
                )
            if self.stat != "mean":
                raise bad(
                    "stat p1/min applies to floors only",
                    "drop stat, or use min: instead of max_drop:",
                    "gates.stat",
                )
        else:
            if self.relative:
                raise bad("relative applies to max_drop only", "remove relative", "gates.relative")
            if not math.isfinite(float(self.min)):  # type: ignore[arg-type]
                raise bad(
                    f"min must be a finite number, got {self.min}",
                    "write e.g. min: 0.9",
                    "gates.min",
                )
        if self.stat not in ("mean", "p1", "min"):
            raise bad(
                f"stat must be mean, p1 or min, got {self.stat!r}",
                "write stat: mean (default), p1 or min",
                "gates.stat",
            )
        if self.method not in intervals.METHODS:
            raise bad(
                f"unknown interval method {self.method!r}",
                f"write stats: {{method: {intervals.DEFAULT_METHOD}}} (one of "
                f"{', '.join(intervals.METHODS)})",
                "stats.method",
            )
        if self.over not in ("per_dataset", "pooled"):
            raise bad(
                f"over must be per_dataset or pooled, got {self.over!r}",
                "write over: per_dataset (every dataset must pass) or over: pooled",
                "gates.over",
            )
        if self.over == "pooled" and self.max_drop is None:
            raise bad(
                "over: pooled applies to allowed-drop gates (a macro-average of paired "
                "differences); a floor is checked per dataset",
                "remove over, or use max_drop",
                "gates.over",
            )
        if not 0.5 <= self.confidence < 1.0:
            raise bad(
                f"confidence must lie in [0.5, 1), got {self.confidence}",
                "write e.g. confidence: 0.95",
                "gates.confidence",
            )

    @property
    def label(self) -> str:
        """Human label: ``nDCG@10 vs qrels max_drop 1%``, ``cosine p1 vs reference min 0.99``."""
        metric = self.metric if self.stat == "mean" else f"{self.metric} {self.stat}"
        if self.max_drop is not None:
            drop = f"{self.max_drop * 100:g}%" if self.relative else f"{self.max_drop:g}"
            return f"{metric} vs {self.against} max_drop {drop}"
        return f"{metric} vs {self.against} min {self.min:g}"


_DROP = re.compile(r"^\s*(?P<number>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<percent>%?)\s*$")


def parse_max_drop(
    value: str | float | int, field_name: str = "gates.max_drop"
) -> tuple[float, bool]:
    """``"1%"`` -> ``(0.01, True)`` (relative to the reference mean); ``"0.01"`` or
    ``0.01`` -> ``(0.01, False)`` (absolute, in the measure's units). Raises
    :class:`InputError` on anything else (negative, non-numeric, over 100%)."""
    fix = "write max_drop: 0.01 (absolute, in the measure's units) or max_drop: 1% (relative)"
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InputError(
            message=f"max_drop must be a number or a percentage, got {value!r}",
            field=field_name,
            fix=fix,
        )
    if isinstance(value, (int, float)):
        number = float(value)
        if not (math.isfinite(number) and number >= 0.0):
            raise InputError(
                message=f"max_drop must be finite and >= 0, got {value!r}",
                field=field_name,
                fix=fix,
            )
        return number, False
    match = _DROP.match(value)
    if not match:
        raise InputError(message=f"cannot read max_drop {value!r}", field=field_name, fix=fix)
    number = float(match["number"])
    if match["percent"]:
        if number > 100.0:
            raise InputError(
                message=f"a relative max_drop over 100% ({value!r}) allows anything",
                field=field_name,
                fix=fix,
            )
        return number / 100.0, True
    return number, False


def validate_gate(spec: GateSpec) -> Measure:
    """Check the gate's metric against the measure registry (config validation calls
    this): it must parse, be measured against what the gate says, and have a direction
    the gate understands. Returns the parsed measure."""
    measure = _parse(spec.metric)
    family = FAMILIES[measure.family]
    if family.against != spec.against:
        raise InputError(
            message=f"gate on {spec.metric}: this measure is computed against "
            f"{family.against}, but the gate says against: {spec.against}",
            field="gates.against",
            fix=f"write against: {family.against}",
        )
    if not family.higher_is_better:
        raise InputError(
            message=f"gate on {spec.metric}: gates support measures where higher is better",
            field="gates.metric",
            fix="gate a measure where higher is better",
        )
    return measure


def _parse(metric: str) -> Measure:
    # The registry imports every measure module, so any family parses; imported here to
    # keep ``gate`` importable (and testable) without the metric implementations loaded.

    return parse_measure(metric)


@dataclass(frozen=True)
class GateCheck:
    gate: str
    passed: bool
    verdict: Verdict
    reason: str
    figures: dict[str, Figure] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready (non-finite figures become None: JSON has no NaN)."""
        out = asdict(self)
        out["figures"] = {k: _json_figure(v) for k, v in self.figures.items()}
        return out


@dataclass(frozen=True)
class VariantGate:
    """``passed``: no check failed (what the run's exit code reads). ``gated``: at least
    one quality gate applied; preflight checks (parity) alone do not make a candidate
    gated, so they can fail it but never certify it."""

    passed: bool
    checks: tuple[GateCheck, ...]
    gated: bool = True

    @property
    def verdict(self) -> Outcome:
        return outcome(self.checks, self.gated)

    def to_dict(self) -> dict[str, object]:
        return {"passed": self.passed, "checks": [c.to_dict() for c in self.checks]}


def outcome(checks: Sequence[GateCheck], gated: bool) -> Outcome:
    """One rule for every kind of run: a failed check fails, an undecided one is
    inconclusive, and only a candidate with at least one quality gate can pass."""
    if any(c.verdict == "fail" for c in checks):
        return "fail"
    if any(not c.passed for c in checks):
        return "inconclusive"
    return "pass" if gated else "ungated"


def summary_passed(verdict: Outcome) -> bool | None:
    """A candidate's ``passed`` in ``summary.json``: ``None`` when ungated."""
    return None if verdict == "ungated" else verdict == "pass"


def _json_figure(value: Figure) -> Figure:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


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


def _drop_interval(
    spec: GateSpec, diffs: Sequence[np.ndarray], cand: Sequence[np.ndarray],
    ref: Sequence[np.ndarray], resamples: int, seed: int,
) -> tuple[float, float, float, float]:
    """(delta, ci_low, ci_high, sd); one array keeps the historical percentile numbers."""
    if spec.method == intervals.HISTORICAL_METHOD and len(diffs) == 1:
        d = stats.paired_bootstrap(cand[0], ref[0], spec.confidence, resamples, seed)
        return d.delta, d.ci_low, d.ci_high, d.sd
    iv = intervals.interval(list(diffs), spec.method, spec.confidence, resamples, seed)
    sd = iv.se * math.sqrt(iv.n) if math.isfinite(iv.se) else math.nan
    return iv.estimate, iv.low, iv.high, sd


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
    ev = _drop_evidence(spec, cands, refs, resamples, seed)
    figures = _drop_figures(spec, ev, resamples, seed)
    if len(cands) > 1:
        figures["over"] = "pooled"
        figures["datasets"] = len(cands)
    return _drop_check(spec, label, ev, figures)


@dataclass(frozen=True)
class _DropEvidence:
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


def _drop_evidence(
    spec: GateSpec, cands: Sequence[np.ndarray], refs: Sequence[np.ndarray],
    resamples: int, seed: int,
) -> _DropEvidence:
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
    return _DropEvidence(
        n=n, reference_mean=reference_mean, candidate_mean=candidate_mean, delta=delta,
        ci_low=ci_low, ci_high=ci_high, sd=sd, margin=margin, nonzero=nonzero,
        constant=constant, sparse_low=sparse_low, mde=mde, needed=needed, certify=certify,
        p_value=p_value,
    )


def _drop_figures(spec: GateSpec, ev: _DropEvidence, resamples: int, seed: int
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


def _drop_check(spec: GateSpec, label: str, ev: _DropEvidence,
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
        "method": intervals.HISTORICAL_METHOD,
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
    name = _parse(spec.metric).name  # "ndcg_cut_10" -> "nDCG@10"
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


class GateRule(Protocol):
    """A gate as a recipe writes it: ``GateConfig`` (embedding gates) and
    ``PipelineGate`` (pipeline gates) both are one."""

    metric: str
    against: str
    max_drop: str | float | None
    min: float | None
    stat: Literal["mean", "p1", "min"]
    confidence: float | None


def gate_spec(cfg: GateConfig | GateRule, default_confidence: float,
              options: StatsOptions | None = None, *, against: str | None = None) -> GateSpec:
    """A recipe gate as the decision rule reads it; ``options`` (the recipe's ``stats:``)
    supply the interval method and the sparse-data rule (defaults when absent). Every
    kind of gate (embedding, pooled, pipeline) is built here, so all read ``stats:``.
    ``against`` overrides the gate's own (a pipeline's fidelity floor is decided against
    the reference run)."""
    drop, relative = (None, False)
    if cfg.max_drop is not None:
        drop, relative = parse_max_drop(cfg.max_drop)
    method = options.method if options is not None else intervals.DEFAULT_METHOD
    min_nonzero = (options.min_nonzero if options is not None
                   else intervals.DEFAULT_MIN_NONZERO)
    return GateSpec(metric=cfg.metric, against=against or cfg.against,  # type: ignore[arg-type]
                    max_drop=drop, relative=relative,
                    min=cfg.min, stat=cfg.stat, confidence=cfg.confidence or default_confidence,
                    method=method, min_nonzero=min_nonzero,
                    over=getattr(cfg, "over", "per_dataset"))
