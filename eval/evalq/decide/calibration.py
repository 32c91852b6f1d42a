"""Does the gate keep its promise? A simulation of its error rates.

A pass claims: with confidence (1+c)/2 (one-sided) the candidate lost no more than the
margin. This module checks the claim by simulation. For each population of per-query
differences it places the true mean exactly at −margin (the boundary: every pass there
is a false pass), at 0 (no change: a fail is a false fail) and at −margin/2 (a pass is
power), draws ``n`` queries with replacement many times, and runs the gate's own rule
(:func:`evalq.decide.gate.drop_outcome` on intervals from :mod:`evalq.decide.intervals`)
on each draw.

Populations: the per-query differences of every candidate of a results folder (each
allowed-drop gate, each dataset) and a synthetic panel of the shapes where intervals go
wrong (sparse 2–20 % non-zero, heavy tails, bimodal, dense normal, all ties but one).
A population is moved to a target mean by shifting its non-zero values only (sparsity is
kept) and clipping to [−1, 1] (a difference of two values in [0, 1]), repeated until the
mean is exact.

Why it is fast: the bootstrap of a mean only needs how often each query is drawn. One
matrix of draw counts (resamples × n) serves a block of trials, so the resampled means of
thousands of simulated gates are one matrix product (and the resampled spreads another).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from evalq.core.gates import DEFAULT_METHOD, DEFAULT_MIN_NONZERO
from evalq.decide import intervals
from evalq.decide.gate import drop_outcome

SIZES = (20, 50, 100, 300, 1000)
SCENARIOS = {"boundary": -1.0, "null": 0.0, "half": -0.5}  # true mean, in margins
PANEL_MARGIN = 0.01


@dataclass(frozen=True)
class Population:
    name: str
    source: str  # "panel" or the results folder
    values: np.ndarray
    margin: float


@dataclass(frozen=True)
class Rule:
    """What the gate runs: an interval method and the sparse-data threshold."""

    method: str
    min_nonzero: int

    @property
    def name(self) -> str:
        return self.method if self.min_nonzero == 0 else f"{self.method}+sparse{self.min_nonzero}"


RULES = (
    Rule("percentile", 0),
    Rule("t", 0),
    Rule("bca", 0),
    Rule("bootstrap-t", 0),
    Rule("t", DEFAULT_MIN_NONZERO),
    Rule("bca", DEFAULT_MIN_NONZERO),
    Rule("bootstrap-t", DEFAULT_MIN_NONZERO),
    Rule("t-and-bootstrap-t", DEFAULT_MIN_NONZERO),  # the default before the share bound
    Rule(DEFAULT_METHOD, DEFAULT_MIN_NONZERO),
)
DEFAULT_RULE = Rule(DEFAULT_METHOD, DEFAULT_MIN_NONZERO)


@dataclass(frozen=True)
class Cell:
    rule: str
    population: str
    source: str
    n: int
    trials: int
    false_pass: float  # pass rate at the boundary
    false_fail: float  # fail rate with no change
    pass_at_zero: float  # pass rate with no change
    power_half: float  # pass rate at half the margin
    bound: float  # nominal one-sided level plus Monte Carlo allowance
    within_bound: bool


def at_mean(values: np.ndarray, target: float) -> np.ndarray | None:
    """``values`` with the non-zero ones shifted (and clipped to [−1, 1]) so that the mean
    is ``target``; None when nothing is non-zero (no shape to move)."""
    out = np.asarray(values, dtype=np.float64).copy()
    mask = out != 0.0
    k = int(mask.sum())
    if k == 0:
        return None
    for _ in range(100):
        gap = target - out.mean()
        if abs(gap) <= 1e-15:
            break
        movable = mask & (((gap < 0) & (out > -1.0)) | ((gap > 0) & (out < 1.0)))
        if not movable.any():
            return None
        out[movable] = np.clip(out[movable] + gap * out.size / movable.sum(), -1.0, 1.0)
    out[mask & (out == 0.0)] = np.copysign(1e-12, target or 1.0)  # keep sparsity exact
    return out


def synthetic_panel(seed: int = 20261130, size: int = 5000) -> list[Population]:
    """The shapes named in the issue, in units of nDCG differences (margin 0.01)."""
    rng = np.random.default_rng(seed)
    panel = []
    for share in (0.02, 0.05, 0.10, 0.20):
        values = np.zeros(size)
        k = round(share * size)
        values[:k] = np.clip(rng.normal(0.0, 0.25, k), -1.0, 1.0)
        panel.append(Population(f"sparse-{share:.0%}", "panel", values, PANEL_MARGIN))
    panel.append(Population("heavy-tailed", "panel",
                            np.clip(0.03 * rng.standard_t(2.0, size), -1.0, 1.0), PANEL_MARGIN))
    signs = rng.choice([-1.0, 1.0], size)
    panel.append(Population("bimodal", "panel", signs * 0.15 + rng.normal(0, 0.03, size),
                            PANEL_MARGIN))
    panel.append(Population("dense-normal", "panel", rng.normal(0.0, 0.05, size),
                            PANEL_MARGIN))
    # One query in 1/margin differs, by the most a measure in [0, 1] can drop.
    ties = np.zeros(round(1.0 / PANEL_MARGIN))
    ties[0] = -1.0
    panel.append(Population("all-ties-but-one", "panel", ties, PANEL_MARGIN))
    return panel


def count_matrix(rng: np.random.Generator, resamples: int, n: int) -> np.ndarray:
    """How often each of n positions is drawn, per bootstrap resample (resamples × n).

    Public because the search's calibration (:mod:`evalq.decide.search_calibration`)
    bootstraps its simulated gates the same way."""
    index = rng.integers(0, n, size=(resamples, n)) + (np.arange(resamples) * n)[:, None]
    return np.bincount(index.ravel(), minlength=resamples * n).reshape(resamples, n).astype(
        np.float64)


@dataclass(frozen=True)
class Replicates:
    """What every rule needs from a block of simulated samples (trials × n), computed
    once: the moments, the bootstrap replicates and the sparse-data facts. The bootstrap
    is the cost of a simulation; deciding the same samples at several confidences (a
    Holm step-down does) reuses it through :func:`outcomes`."""

    n: int
    estimate: np.ndarray
    se: np.ndarray
    nonzero: np.ndarray
    constant: np.ndarray
    boot_means: np.ndarray
    boot_se: np.ndarray
    accel: np.ndarray


def replicates(samples: np.ndarray, counts: Sequence[np.ndarray]) -> Replicates:
    """The moments and bootstrap replicates of every row of ``samples`` (trials × n).
    ``counts`` are draw-count matrices (:func:`count_matrix`), one per block of trials."""
    trials, n = samples.shape
    estimate = samples.mean(axis=1)
    sd = samples.std(axis=1, ddof=1)
    se = sd / math.sqrt(n)
    nonzero = np.count_nonzero(samples, axis=1)
    constant = np.all(samples == samples[:, :1], axis=1)
    # Only non-zero values move a resampled mean, and the columns of a draw-count matrix
    # are exchangeable: put each trial's non-zero values first and multiply those only.
    order = np.argsort(samples == 0.0, axis=1, kind="stable")
    packed = np.take_along_axis(samples, order, axis=1)[:, :max(1, int(nonzero.max()))]
    blocks = np.array_split(np.arange(trials), len(counts))
    boot_means = np.empty((trials, counts[0].shape[0]))
    boot_se = np.empty_like(boot_means)
    for rows, c in zip(blocks, counts):
        # float32 products: counts are exact, and 1e-7 relative error is far below the
        # Monte Carlo error of the rates; the spread stays exactly 0 where it is 0.
        x = packed[rows].astype(np.float32)
        ct = np.ascontiguousarray(c[:, :x.shape[1]].T, dtype=np.float32)
        m1 = (x @ ct).astype(np.float64) / n
        m2 = ((x * x) @ ct).astype(np.float64) / n
        boot_means[rows] = m1
        boot_se[rows] = np.sqrt(np.maximum(m2 - m1 * m1, 0.0) * n / (n - 1) / n)
    centred = samples - estimate[:, None]
    den = np.sum(centred**2, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        accel = np.where(den > 0, np.sum(centred**3, axis=1) / (6.0 * den**1.5), 0.0)
    return Replicates(n, estimate, se, nonzero, constant, boot_means, boot_se, accel)


def outcomes(rep: Replicates, margin: float, rules: Sequence[Rule],
             confidence: float) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Every rule's (passed, failed) per row at ``confidence``, by the gate's own code
    (:func:`evalq.decide.intervals.bounds` and :func:`evalq.decide.gate.drop_outcome`);
    a row neither passed nor failed is inconclusive."""
    trials, n = rep.estimate.size, rep.n
    alpha = (1.0 - confidence) / 2.0
    sparse_low = -np.array([intervals.nonzero_rate_bound(int(k), n, alpha) for k in rep.nonzero])
    t_se = rep.se * np.array([intervals.share_factor(int(k), n, alpha) for k in rep.nonzero])
    df = np.full(trials, float(n - 1))
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    lows: dict[str, np.ndarray] = {}
    for rule in rules:
        if rule.method not in lows:
            low, _ = intervals.bounds(rule.method, confidence, rep.estimate, rep.se, df,
                                      rep.boot_means, rep.boot_se, rep.accel, t_se)
            # Constant samples: every method's interval is the constant (intervals.interval).
            lows[rule.method] = np.where(rep.constant, rep.estimate, low)
        out[rule.name] = drop_outcome(rep.estimate, lows[rule.method], np.full(trials, n),
                                      rep.nonzero, rep.constant, margin, rule.min_nonzero,
                                      sparse_low)
    return out


def simulate(
    samples: np.ndarray,
    margin: float,
    rules: Sequence[Rule],
    confidence: float,
    counts: Sequence[np.ndarray],
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Run every rule on every row of ``samples`` (trials × n): (passed, failed) per
    rule. ``counts`` are draw-count matrices, one per block of trials."""
    return outcomes(replicates(samples, counts), margin, rules, confidence)


def calibrate(
    populations: Sequence[Population],
    *,
    sizes: Sequence[int] = SIZES,
    trials: int = 2000,
    resamples: int = 999,
    confidence: float = 0.95,
    rules: Sequence[Rule] = RULES,
    seed: int = 0,
    blocks: int = 4,
) -> list[Cell]:
    """Error rates of every rule on every population and query count (seeded)."""
    alpha = (1.0 - confidence) / 2.0
    allowance = 3.0 * math.sqrt(alpha * (1.0 - alpha) / trials)
    cells = []
    for p_index, pop in enumerate(populations):
        moved = {s: at_mean(pop.values, f * pop.margin) for s, f in SCENARIOS.items()}
        if moved["boundary"] is None:
            continue  # identical to the reference: nothing to move to the boundary
        if moved["null"] is None:
            moved["null"] = np.zeros_like(pop.values)
        for n in sizes:
            rng = np.random.default_rng([seed, p_index, n])
            counts = [count_matrix(rng, resamples, n) for _ in range(blocks)]
            draw = rng.integers(0, pop.values.size, size=(trials, n))
            rates: dict[str, dict[str, np.ndarray]] = {}
            for scenario, values in moved.items():
                assert values is not None
                for rule, (passed, failed) in simulate(values[draw], pop.margin, rules,
                                                       confidence, counts).items():
                    rates.setdefault(rule, {})[scenario + "_pass"] = passed.mean()
                    rates[rule][scenario + "_fail"] = failed.mean()
            for each in rules:
                r = rates[each.name]
                cells.append(Cell(each.name, pop.name, pop.source, n, trials,
                                  float(r["boundary_pass"]), float(r["null_fail"]),
                                  float(r["null_pass"]), float(r["half_pass"]),
                                  alpha + allowance,
                                  bool(r["boundary_pass"] <= alpha + allowance)))
    return cells


def table(cells: Sequence[Cell]) -> str:
    """One row per rule and n: the worst false-pass rate over the populations (and where),
    the worst false-fail rate, and the median power at half the margin."""
    lines = [f"{'rule':28s} {'n':>5s} {'false-pass max':>15s} {'at':28s} "
             f"{'false-fail max':>14s} {'power@m/2 med':>13s} {'within bound':>12s}"]
    keys = sorted({(c.rule, c.n) for c in cells},
                  key=lambda k: ([r.name for r in RULES].index(k[0])
                                 if k[0] in [r.name for r in RULES] else 99, k[1]))
    for rule, n in keys:
        group = [c for c in cells if c.rule == rule and c.n == n]
        worst = max(group, key=lambda c: c.false_pass)
        ok = sum(c.within_bound for c in group)
        lines.append(
            f"{rule:28s} {n:5d} {worst.false_pass:15.3f} {worst.population[:28]:28s} "
            f"{max(c.false_fail for c in group):14.3f} "
            f"{float(np.median([c.power_half for c in group])):13.3f} "
            f"{ok:>5d}/{len(group):<6d}")
    return "\n".join(lines)


def detail(cells: Sequence[Cell], rules: Sequence[str]) -> str:
    """False-pass rate per population and n for the given rules (columns)."""
    pops = list(dict.fromkeys(c.population for c in cells))
    sizes = sorted({c.n for c in cells})
    index = {(c.rule, c.population, c.n): c for c in cells}
    head = f"{'population':34s} " + " ".join(f"{r[:10] + '@' + str(n):>15s}"
                                              for r in rules for n in sizes)
    lines = [head]
    for p in pops:
        row = [f"{index[(r, p, n)].false_pass:15.3f}" if (r, p, n) in index else " " * 15
               for r in rules for n in sizes]
        lines.append(f"{p[:34]:34s} " + " ".join(row))
    return "\n".join(lines)


def report(cells: Sequence[Cell]) -> dict[str, Any]:
    return {"cells": [asdict(c) for c in cells],
            "default_rule": DEFAULT_RULE.name,
            "sizes": sorted({c.n for c in cells})}
