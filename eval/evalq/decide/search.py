"""Searching many configurations without letting chance pick the winner.

Testing thirty configurations with a 2.5 % one-sided gate each and keeping the best one
certifies a configuration that is really past the margin far more often than 2.5 %: the
"winner" is favoured by its noise. A search keeps the stated error rate by two devices,
both fixed before a single confirm-half value is looked at:

**Explore / confirm split.** The queries are split once, by seed, into an *explore* part
and a *confirm* part (:func:`split_queries`). Exploring ranks and prunes the grid on the
explore queries only; the few survivors are then decided on the confirm queries, which
the pruning never saw, so the confirm decisions are not biased by the selection.

**Holm's step-down over the survivors.** The ``m`` survivors are confirmed as a family
(:func:`holm`): every survivor is decided at level ``alpha / m``; those that pass are
certified, and the rest are decided again at ``alpha / (m - r)`` where ``r`` have passed
so far, until a round certifies nothing. This is Holm's procedure expressed through the
gates' own decisions instead of p-values: a gate that passes at one-sided level ``a``
passes at every larger level (its interval only narrows as the confidence drops), so
"passes at ``alpha / k``" is "p ≤ ``alpha / k``". The family-wise false-pass rate, the
chance that *any* configuration that is truly past its margin gets certified, is then at
most ``alpha``; ``evalq.decide.search_calibration`` simulates it rather than assuming it.

Each configuration's verdict inside the family is the gates' one verdict (pass only if
every gate passes: an intersection-union test, which needs no correction across the
gates of one configuration).

Marks: ``certified`` (passed in the confirm family), ``failed`` and ``inconclusive``
(the confirm verdict at the last level a survivor was decided at), ``not confirmed``
(pruned on the explore half: never tested, so never certified).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from evalq.core.errors import InputError

Verdict = Literal["pass", "fail", "inconclusive"]
Mark = Literal["certified", "failed", "inconclusive", "not confirmed"]

_MARK: dict[Verdict, Mark] = {"pass": "certified", "fail": "failed",
                              "inconclusive": "inconclusive"}


@dataclass(frozen=True)
class QuerySplit:
    """The queries of one dataset, split once by seed. Both parts are sorted ids."""

    explore: tuple[str, ...]
    confirm: tuple[str, ...]
    seed: int
    explore_fraction: float


def split_queries(query_ids: Sequence[str], *, seed: int, explore_fraction: float = 0.5,
                  min_confirm: int = 1, where: str = "search.split") -> QuerySplit:
    """Split ``query_ids`` into explore and confirm parts, the same way for the same ids
    and seed on every machine (the ids are sorted first, so their order on disk does not
    matter). Refuses a split that leaves fewer than ``min_confirm`` confirm queries or no
    explore query: nothing could be confirmed, or nothing pruned honestly."""
    ids = sorted(set(query_ids))
    if len(ids) != len(query_ids):
        raise InputError(message=f"{len(query_ids) - len(ids)} duplicate query ids",
                         field=where, fix="give each query one id")
    if not 0.0 < explore_fraction < 1.0:
        raise InputError(message=f"explore fraction {explore_fraction} is not in (0, 1)",
                         field=f"{where}.explore", fix="write explore: 0.5 (the default)")
    n_explore = round(len(ids) * explore_fraction)
    n_confirm = len(ids) - n_explore
    if n_explore < 1 or n_confirm < min_confirm:
        raise InputError(
            message=f"{len(ids)} queries split {explore_fraction:g} / "
            f"{1 - explore_fraction:g} leave {n_explore} to explore and {n_confirm} to "
            f"confirm; confirming needs at least {min_confirm}",
            field=f"{where}.explore",
            fix=f"use more queries (max_queries, at least "
            f"{math.ceil(min_confirm / (1 - explore_fraction))} at this split) or lower "
            "search.split.explore")
    order = np.random.default_rng(seed).permutation(len(ids))
    explore = tuple(sorted(ids[i] for i in order[:n_explore]))
    confirm = tuple(sorted(ids[i] for i in order[n_explore:]))
    return QuerySplit(explore, confirm, seed, explore_fraction)


@dataclass(frozen=True)
class Confirmation:
    """One survivor's outcome in the confirm family: its mark and the one-sided level it
    was last decided at (the level it was certified at, or the last it failed to pass)."""

    mark: Mark
    alpha: float
    rounds: int


def holm(names: Sequence[str], alpha: float,
         decide_at: Callable[[str, float], Verdict]) -> dict[str, Confirmation]:
    """Holm's step-down over ``names`` at family-wise one-sided level ``alpha``.

    ``decide_at(name, level)`` decides one configuration's gates on the confirm queries
    at one-sided level ``level`` (a gate's ``confidence`` is ``1 - 2 * level``) and returns
    its one verdict. Called at most ``len(names)`` times per name."""
    if not 0.0 < alpha < 0.5:
        raise ValueError(f"alpha must be in (0, 0.5), got {alpha}")
    if len(set(names)) != len(names):
        raise ValueError("holm: duplicate configuration names")
    remaining = list(names)
    out: dict[str, Confirmation] = {}
    rounds = 0
    while remaining:
        rounds += 1
        level = alpha / len(remaining)
        verdicts = {name: decide_at(name, level) for name in remaining}
        passed = [name for name in remaining if verdicts[name] == "pass"]
        for name in passed:
            out[name] = Confirmation("certified", level, rounds)
        if not passed:
            for name in remaining:
                out[name] = Confirmation(_MARK[verdicts[name]], level, rounds)
            break
        remaining = [name for name in remaining if name not in passed]
    return out


@dataclass(frozen=True)
class Point:
    """One configuration as the frontier sees it: lower cost and higher quality are
    better."""

    name: str
    cost: float
    quality: float


def pareto_frontier(points: Sequence[Point]) -> list[str]:
    """The names of the points no other point dominates (at most the cost and at least
    the quality, strictly better in one), cheapest first. Equal points are all kept.
    A point whose quality or cost is NaN (a broken query's undefined metric) is on no
    frontier: every comparison with NaN is false, so it was never dominated and always
    drawn as optimal. Quadratic, which a grid of a few hundred points does not notice."""
    measured = [p for p in points if not (math.isnan(p.quality) or math.isnan(p.cost))]

    def dominated(p: Point) -> bool:
        return any(q.cost <= p.cost and q.quality >= p.quality
                   and (q.cost < p.cost or q.quality > p.quality) for q in measured)

    kept = [p for p in measured if not dominated(p)]
    return [p.name for p in sorted(kept, key=lambda p: (p.cost, -p.quality, p.name))]


def cheapest_certified(points: Sequence[Point], marks: Mapping[str, Mark]) -> str | None:
    """The recommendation: the cheapest certified point (ties: higher quality, then
    name); ``None`` when nothing is certified. Only certified points are named."""
    certified = [p for p in points if marks.get(p.name) == "certified"]
    if not certified:
        return None
    return min(certified, key=lambda p: (p.cost, -p.quality, p.name)).name


def survivors(points: Sequence[Point], explore: Mapping[str, Verdict], keep: int) -> list[str]:
    """The configurations confirmed: those whose explore-half verdict is not ``fail``
    (their observed drop is within the margin), the ``keep`` cheapest of them. Chosen on
    explore queries only, so the confirm family is fixed before it is tested."""
    if keep < 1:
        raise ValueError(f"keep must be at least 1, got {keep}")
    alive = [p for p in points if explore.get(p.name, "fail") != "fail"]
    alive.sort(key=lambda p: (p.cost, -p.quality, p.name))
    return [p.name for p in alive[:keep]]
