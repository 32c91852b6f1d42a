"""Paired bootstrap, randomization test, MDE: coverage, determinism, edge cases."""

from __future__ import annotations

import math
import warnings
from statistics import NormalDist

import numpy as np
import pytest

from evalq.decide import stats


def test_identical_inputs() -> None:
    x = np.random.default_rng(0).uniform(size=100)
    diff = stats.paired_bootstrap(x, x.copy())
    assert (diff.delta, diff.ci_low, diff.ci_high, diff.sd) == (0.0, 0.0, 0.0, 0.0)
    assert stats.randomization_test(x, x.copy()) == 1.0


def test_deterministic_with_seed_and_seed_matters() -> None:
    rng = np.random.default_rng(1)
    ref = rng.uniform(size=300)
    cand = ref + rng.normal(0.0, 0.05, size=300)
    a = stats.paired_bootstrap(cand, ref, seed=3)
    b = stats.paired_bootstrap(cand, ref, seed=3)
    c = stats.paired_bootstrap(cand, ref, seed=4)
    assert a == b
    assert (a.ci_low, a.ci_high) != (c.ci_low, c.ci_high)
    assert stats.randomization_test(cand, ref, seed=3) == stats.randomization_test(
        cand, ref, seed=3
    )


def test_blocking_does_not_change_the_draws(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=50)
    whole = stats.bootstrap_mean_ci(x, resamples=2000, seed=5)
    monkeypatch.setattr(stats, "_BLOCK_ELEMENTS", 50 * 7)  # 7 resamples per block
    blocked = stats.bootstrap_mean_ci(x, resamples=2000, seed=5)
    assert whole == blocked


def test_bootstrap_ci_covers_the_true_difference_at_about_nominal_rate() -> None:
    rng = np.random.default_rng(123)
    true_delta, covered, reps = 0.02, 0, 300
    for rep in range(reps):
        ref = rng.uniform(0.2, 0.8, size=60)
        cand = ref + rng.normal(true_delta, 0.1, size=60)
        diff = stats.paired_bootstrap(cand, ref, confidence=0.9, resamples=1000, seed=rep)
        covered += diff.ci_low <= true_delta <= diff.ci_high
    # nominal 0.90; percentile bootstrap under-covers slightly at n=60. 300 reps: sd ~0.017
    assert 0.84 <= covered / reps <= 0.96


def test_interval_width_matches_normal_theory() -> None:
    rng = np.random.default_rng(9)
    d = rng.normal(0.0, 1.0, size=2000)
    diff = stats.paired_bootstrap(d, np.zeros_like(d))
    expected_half = 1.96 * d.std(ddof=1) / math.sqrt(d.size)
    assert (diff.ci_high - diff.ci_low) / 2 == pytest.approx(expected_half, rel=0.05)
    assert diff.ci_low < diff.delta < diff.ci_high


def test_randomization_small_for_clear_shift_and_exact_for_small_n() -> None:
    rng = np.random.default_rng(4)
    ref = rng.uniform(size=200)
    cand = ref + 0.1 + rng.normal(0.0, 0.1, size=200)
    assert stats.randomization_test(cand, ref) == pytest.approx(1 / 10_001)
    # n = 3, all differences +1: only the all-plus and all-minus patterns reach |sum| = 3
    assert stats.randomization_test(np.ones(3), np.zeros(3)) == pytest.approx(2 / 8)
    # n = 4, differences 1, 1, 1, -1: |sum| >= 2 for patterns with at most one odd sign: 10/16
    assert stats.randomization_test(np.array([1.0, 1, 1, -1]), np.zeros(4)) == pytest.approx(
        10 / 16
    )


def test_randomization_is_roughly_uniform_under_the_null() -> None:
    rng = np.random.default_rng(8)
    p_values = [
        stats.randomization_test(rng.normal(size=40), rng.normal(size=40), 999, seed=i)
        for i in range(100)
    ]
    assert 0.0 <= np.mean(np.array(p_values) < 0.05) <= 0.12
    assert 0.35 <= np.mean(p_values) <= 0.65


def test_minimum_detectable_effect_formula_and_inverse() -> None:
    rng = np.random.default_rng(5)
    d = rng.normal(0.0, 0.2, size=400)
    alpha = 0.025
    z = NormalDist().inv_cdf
    expected = (z(1 - alpha) + z(0.8)) * d.std(ddof=1) / math.sqrt(400)
    mde = stats.minimum_detectable_effect(d, alpha, power=0.8)
    assert mde == pytest.approx(expected)
    assert stats.queries_needed(float(d.std(ddof=1)), mde, alpha) == 400
    assert stats.queries_needed(0.2, -0.01, alpha) is None
    assert stats.minimum_detectable_effect(np.full(10, 0.3), alpha) == 0.0


def test_edge_cases_without_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        empty = stats.paired_bootstrap(np.array([]), np.array([]))
        assert empty.n == 0 and math.isnan(empty.delta) and math.isnan(empty.ci_low)
        assert stats.randomization_test(np.array([]), np.array([])) == 1.0
        assert stats.minimum_detectable_effect(np.array([]), 0.025) == math.inf

        one = stats.paired_bootstrap(np.array([0.5]), np.array([0.2]))
        assert one.delta == pytest.approx(0.3)
        assert (one.ci_low, one.ci_high) == (one.delta, one.delta)
        assert math.isnan(one.sd)
        assert stats.minimum_detectable_effect(np.array([0.3]), 0.025) == math.inf

        constant = stats.paired_bootstrap(np.full(20, 0.7), np.full(20, 0.5))
        assert constant.ci_low == constant.ci_high == pytest.approx(0.2)
        mean = stats.bootstrap_mean_ci(np.array([]))
        assert mean.n == 0 and math.isnan(mean.mean)


def test_bootstrap_mean_ci_single_sample() -> None:
    x = np.random.default_rng(6).uniform(0.85, 1.0, size=500)
    ci = stats.bootstrap_mean_ci(x)
    assert ci.ci_low < x.mean() < ci.ci_high
    assert ci.ci_high - ci.ci_low < 0.01


def test_mismatched_lengths_and_bad_confidence_raise() -> None:
    with pytest.raises(ValueError, match="equal lengths"):
        stats.paired_bootstrap(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="confidence"):
        stats.paired_bootstrap(np.ones(3), np.ones(3), confidence=1.0)
