"""Does the grid search keep its promise? Its family-wise false-pass rate, simulated.

:mod:`evalq.decide.search` claims that a search certifies a configuration truly past its
margin with probability at most ``alpha``, however many configurations the grid holds.
This module checks the claim the way :mod:`evalq.decide.calibration` checks one gate's:
by running the procedure many times where the answer is known.

The least favourable null: every one of ``G`` configurations has a true mean drop of
exactly the margin, so *any* certified point is a false pass. The configurations are
correlated as the points of a real grid are (they are scored on the same queries, and a
query that is fragile for one quantization is fragile for the next): configuration
``g``'s per-query difference is the shared population value with probability
``√correlation``, else the value of an independently permuted copy (so two
configurations' differences correlate by about ``correlation``), and each configuration
is then moved to a mean of exactly −margin (:func:`calibration.at_mean`,
sparsity kept). A simulated search draws ``n`` queries (the same for every
configuration), then runs the search's own functions:

1. :func:`search.split_queries` splits them by the search's seed;
2. each configuration's explore verdict is the gate's rule on the explore queries at the
   gate's confidence (the real interval and decision code, through
   :func:`calibration.outcomes`);
3. :func:`search.survivors` keeps the ``keep`` cheapest that did not fail;
4. :func:`search.holm` confirms them on the confirm queries, each round's level ``a``
   deciding the gate at confidence ``1 − 2a``.

A run where any point ends ``certified`` is a family-wise false pass. Two contrasts run
on the same draws: the **naive** procedure (every configuration gated at full ``alpha``
on all the queries, any pass kept: the multiple-comparisons trap) and the split **without
a correction** (survivors confirmed at ``alpha`` each), which shows what Holm adds.

Rates come with their 95 % Clopper–Pearson interval: every search draws its own queries,
split and bootstrap resamples (shared by its configurations, as a real search's gates
share one seed), so the searches are independent trials. Speed: the bootstrap is the
cost, so each block of searches is one matrix of samples bootstrapped once
(:func:`calibration.replicates`) and decided at every Holm level from the same replicates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from evalq.decide import intervals
from evalq.decide.calibration import (
    DEFAULT_RULE,
    Population,
    Replicates,
    at_mean,
    count_matrix,
    outcomes,
    replicates,
)
from evalq.decide.search import Point, Verdict, holm, split_queries, survivors

PROCEDURES = ("search", "split without correction", "naive")


@dataclass(frozen=True)
class Setting:
    """One simulated grid: ``configurations`` points at the margin, at most ``keep`` of
    them confirmed, ``queries`` queries split ``explore_fraction`` / rest."""

    configurations: int
    keep: int = 5
    queries: int = 200
    correlation: float = 0.5  # between two configurations' per-query differences
    explore_fraction: float = 0.5
    alpha: float = 0.025  # family-wise, one-sided


@dataclass(frozen=True)
class Rate:
    """How often one procedure certified anything, over ``searches`` simulated searches,
    with the 95 % Clopper–Pearson interval of that rate."""

    procedure: str
    population: str  # a panel population, or "all" (pooled)
    configurations: int
    keep: int
    queries: int
    correlation: float
    alpha: float
    searches: int
    false_passes: int
    rate: float
    low: float
    high: float


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact two-sided interval of a binomial rate from ``k`` events in ``n`` trials."""
    tail = (1.0 - confidence) / 2.0
    low = 0.0 if k == 0 else intervals.beta_ppf(tail, k, n - k + 1)
    high = 1.0 if k == n else intervals.beta_ppf(1.0 - tail, k + 1, n - k)
    return low, high


def grid_populations(base: Population, configurations: int, correlation: float,
                     rng: np.random.Generator) -> np.ndarray:
    """``configurations`` × N per-query differences, each row at a mean of exactly
    −margin, taking each query's value from ``base`` with probability ``√correlation``
    (the shared query effect; two rows then correlate by about ``correlation``) and from
    a permuted copy otherwise (the configuration's own)."""
    if not 0.0 <= correlation <= 1.0:
        raise ValueError(f"correlation must be in [0, 1], got {correlation}")
    shared = base.values
    share = correlation ** 0.5
    rows = []
    for _ in range(configurations):
        own = shared[rng.permutation(shared.size)]
        mixed = np.where(rng.random(shared.size) < share, shared, own)
        moved = at_mean(mixed, -base.margin)
        if moved is None:  # every value zero after mixing: take the shared shape
            moved = at_mean(shared, -base.margin)
        assert moved is not None
        rows.append(moved)
    return np.stack(rows)


def _decide(rep: Replicates, margin: float, level: float) -> list[Verdict]:
    """The default rule's verdict per row at one-sided ``level`` (confidence 1 − 2·level)."""
    passed, failed = outcomes(rep, margin, [DEFAULT_RULE], 1.0 - 2.0 * level)[
        DEFAULT_RULE.name]
    return ["pass" if p else "fail" if f else "inconclusive"
            for p, f in zip(passed.tolist(), failed.tolist())]


def _search_once(explore: list[Verdict], quality: np.ndarray,
                 confirm: dict[float, list[Verdict]],
                 setting: Setting) -> tuple[bool, bool]:
    """One search's outcome from its configurations' verdicts: (anything certified by the
    search, anything passed by the split without a correction)."""
    names = [f"c{g}" for g in range(setting.configurations)]
    points = [Point(name, float(g), float(quality[g])) for g, name in enumerate(names)]
    verdicts = {name: explore[g] for g, name in enumerate(names)}
    kept = survivors(points, verdicts, setting.keep)
    if not kept:
        return False, False
    index = {name: g for g, name in enumerate(names)}
    marks = holm(kept, setting.alpha,
                 lambda name, level: confirm[level][index[name]])
    uncorrected = any(confirm[setting.alpha][index[name]] == "pass" for name in kept)
    return any(c.mark == "certified" for c in marks.values()), uncorrected


def _block(grid: np.ndarray, margin: float, setting: Setting, seeds: Sequence[int],
           rng: np.random.Generator, resamples: int) -> np.ndarray:
    """False passes (searches × procedures, booleans) of a block of simulated searches."""
    g_count, n = setting.configurations, setting.queries
    ids = [f"q{i:05d}" for i in range(n)]
    explore_rows, confirm_rows, full_rows = [], [], []
    for seed in seeds:
        draw = grid[:, rng.integers(0, grid.shape[1], size=n)]  # G × n, shared queries
        split = split_queries(ids, seed=seed, explore_fraction=setting.explore_fraction)
        explore_rows.append(draw[:, [int(q[1:]) for q in split.explore]])
        confirm_rows.append(draw[:, [int(q[1:]) for q in split.confirm]])
        full_rows.append(draw)
    explore, confirm, full = (np.concatenate(r) for r in (explore_rows, confirm_rows,
                                                          full_rows))
    # One bootstrap per search, shared by its configurations (a real search's gates use
    # one seed), so the simulated searches are independent and the interval on their
    # rate is honest.
    rep_e, rep_c, rep_f = (
        replicates(x, [count_matrix(rng, resamples, x.shape[1]) for _ in seeds])
        for x in (explore, confirm, full))
    alpha = setting.alpha
    explore_v = _decide(rep_e, margin, alpha)
    # Holm decides at alpha / k for k survivors left: every level it can ask for.
    levels = {alpha / k: _decide(rep_c, margin, alpha / k) for k in range(1, setting.keep + 1)}
    naive = (np.array(_decide(rep_f, margin, alpha)) == "pass").reshape(
        len(seeds), g_count).any(axis=1)
    out = np.zeros((len(seeds), len(PROCEDURES)), dtype=bool)
    for s in range(len(seeds)):
        rows = slice(s * g_count, (s + 1) * g_count)
        out[s, 0], out[s, 1] = _search_once(
            explore_v[rows], rep_e.estimate[rows], {lv: v[rows] for lv, v in levels.items()},
            setting)
    out[:, 2] = naive
    return out


def _rates(hits: np.ndarray, population: str, setting: Setting) -> list[Rate]:
    rates = []
    for p, procedure in enumerate(PROCEDURES):
        k, n = int(hits[:, p].sum()), int(hits.shape[0])
        low, high = clopper_pearson(k, n)
        rates.append(Rate(procedure, population, setting.configurations, setting.keep,
                          setting.queries, setting.correlation, setting.alpha, n, k, k / n,
                          low, high))
    return rates


def simulate_search(populations: Sequence[Population], setting: Setting, *, searches: int,
                    resamples: int = 499, seed: int = 0, block: int = 100) -> list[Rate]:
    """The family-wise false-pass rate of the search and its two contrasts: ``searches``
    simulated searches per population (seeded), one row per procedure and population,
    and one pooled over the populations (``population == "all"``)."""
    if searches < 1:
        raise ValueError(f"searches must be at least 1, got {searches}")
    rates: list[Rate] = []
    pooled = []
    for p_index, pop in enumerate(populations):
        rng = np.random.default_rng([seed, p_index, setting.configurations])
        grid = grid_populations(pop, setting.configurations, setting.correlation, rng)
        seeds = [int(s) for s in rng.integers(0, 2**31, size=searches)]
        hits = np.concatenate([
            _block(grid, pop.margin, setting, seeds[i:i + block], rng, resamples)
            for i in range(0, searches, block)])
        pooled.append(hits)
        rates += _rates(hits, pop.name, setting)
    return _rates(np.concatenate(pooled), "all", setting) + rates


def table(rates: Sequence[Rate]) -> str:
    """One row per procedure, setting and population: false passes, rate and interval."""
    lines = [f"{'procedure':26s} {'G':>3s} {'keep':>4s} {'n':>5s} {'population':20s} "
             f"{'searches':>8s} {'false':>6s} {'rate':>7s} {'95% CP interval':>17s}"]
    for r in rates:
        lines.append(f"{r.procedure:26s} {r.configurations:3d} {r.keep:4d} {r.queries:5d} "
                     f"{r.population[:20]:20s} {r.searches:8d} {r.false_passes:6d} "
                     f"{r.rate:7.4f} [{r.low:.4f}, {r.high:.4f}]")
    return "\n".join(lines)


def report(rates: Sequence[Rate]) -> dict[str, Any]:
    return {"rates": [asdict(r) for r in rates], "rule": DEFAULT_RULE.name,
            "procedures": list(PROCEDURES)}
