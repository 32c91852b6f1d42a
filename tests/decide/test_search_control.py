"""The search's error control pieces: the split, Holm's step-down expressed through gate
verdicts, survivors, the frontier and the recommendation (evalq.decide.search)."""

from __future__ import annotations

import pytest

from evalq.core.errors import InputError
from evalq.decide.search import (
    Point,
    cheapest_certified,
    holm,
    pareto_frontier,
    split_queries,
    survivors,
)


def test_split_is_seeded_disjoint_and_order_free() -> None:
    ids = [f"q{i}" for i in range(101)]
    a = split_queries(ids, seed=7)
    b = split_queries(list(reversed(ids)), seed=7)
    assert a == b
    assert set(a.explore).isdisjoint(a.confirm)
    assert sorted(a.explore + a.confirm) == sorted(ids)
    assert len(a.explore) == 50  # round(101 * 0.5) = 50 (banker's rounding of 50.5)
    assert split_queries(ids, seed=8).explore != a.explore


def test_split_refuses_too_few_to_confirm() -> None:
    with pytest.raises(InputError) as err:
        split_queries([f"q{i}" for i in range(10)], seed=0, min_confirm=10)
    assert err.value.field == "search.split.explore"
    with pytest.raises(InputError):
        split_queries(["a", "a", "b"], seed=0)


def _pvalue_decider(pvalues: dict[str, float], fails: set[str] = frozenset()):  # type: ignore[assignment]
    calls: list[tuple[str, float]] = []

    def decide_at(name: str, level: float) -> str:
        calls.append((name, level))
        if pvalues[name] <= level:
            return "pass"
        return "fail" if name in fails else "inconclusive"

    return decide_at, calls


def test_holm_matches_the_p_value_procedure() -> None:
    # Holm at alpha 0.05 over p = .01, .02, .03, .2: thresholds .0125, .0167, .025, .05.
    # .01 <= .0125 rejects; .02 > .0167 stops: only a is certified.
    p = {"a": 0.01, "b": 0.02, "c": 0.03, "d": 0.2}
    decide_at, _ = _pvalue_decider(p, fails={"d"})
    out = holm(list(p), 0.05, decide_at)  # type: ignore[arg-type]
    assert {n for n, c in out.items() if c.mark == "certified"} == {"a"}
    assert out["b"].mark == "inconclusive" and out["b"].alpha == pytest.approx(0.05 / 3)
    assert out["d"].mark == "failed"
    # p = .01, .015, .2: both .01 and .015 <= .0167 pass in round one (Holm would reject
    # .015 at .025 anyway), then .2 > .05 at round two.
    p2 = {"a": 0.01, "b": 0.015, "c": 0.2}
    decide_at, _ = _pvalue_decider(p2)
    out2 = holm(list(p2), 0.05, decide_at)  # type: ignore[arg-type]
    assert [n for n in p2 if out2[n].mark == "certified"] == ["a", "b"]
    assert out2["b"].alpha == pytest.approx(0.05 / 3) and out2["c"].rounds == 2
    assert out2["c"].alpha == pytest.approx(0.05)


def test_frontier_and_recommendation() -> None:
    pts = [Point("big", 10, 0.90), Point("mid", 5, 0.89), Point("bad", 6, 0.80),
           Point("tiny", 1, 0.50), Point("twin", 5, 0.89)]
    assert pareto_frontier(pts) == ["tiny", "mid", "twin", "big"]
    marks = {"big": "certified", "mid": "inconclusive", "tiny": "failed",
             "twin": "certified", "bad": "not confirmed"}
    assert cheapest_certified(pts, marks) == "twin"  # type: ignore[arg-type]
    assert cheapest_certified(pts, {}) is None
    explore = {"big": "pass", "mid": "inconclusive", "bad": "fail", "tiny": "pass",
               "twin": "pass"}
    assert survivors(pts, explore, keep=2) == ["tiny", "mid"]  # type: ignore[arg-type]
