"""Interval methods against scipy (an oracle here, not a runtime dependency)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats

from evalq.core.gates import METHODS
from evalq.decide import intervals, stats


@pytest.mark.parametrize("df", [1, 2, 5, 9, 49, 299, 5000])
@pytest.mark.parametrize("p", [0.6, 0.975, 0.995])
def test_t_quantile_matches_scipy(df: int, p: float) -> None:
    assert intervals.t_ppf(p, df) == pytest.approx(scipy.stats.t.ppf(p, df), rel=1e-9)
    assert intervals.t_ppf(1 - p, df) == pytest.approx(scipy.stats.t.ppf(1 - p, df), rel=1e-9)


@pytest.mark.parametrize(("k", "n"), [(0, 50), (1, 50), (3, 100), (9, 300), (40, 1000)])
def test_nonzero_rate_bound_is_clopper_pearson(k: int, n: int) -> None:
    exact = scipy.stats.beta.ppf(0.975, k + 1, n - k)
    assert intervals.nonzero_rate_bound(k, n, 0.025) == pytest.approx(exact, rel=1e-9)


def test_t_interval_matches_scipy() -> None:
    x = np.random.default_rng(1).normal(0.01, 0.1, 80)
    iv = intervals.interval(x, "t", 0.95)
    low, high = scipy.stats.t.interval(0.95, 79, loc=x.mean(), scale=x.std(ddof=1) / math.sqrt(80))
    assert (iv.low, iv.high) == pytest.approx((low, high), rel=1e-9)


@pytest.mark.parametrize("shape", ["skewed", "sparse"])
def test_bca_agrees_with_scipy_within_monte_carlo_error(shape: str) -> None:
    rng = np.random.default_rng(2)
    if shape == "skewed":
        x = rng.exponential(size=120) - 1.0
    else:
        x = np.zeros(300)
        x[:30] = rng.normal(-0.1, 0.3, 30)
    ours = intervals.interval(x, "bca", 0.95, resamples=20_000, seed=3)
    theirs = scipy.stats.bootstrap((x,), np.mean, confidence_level=0.95, method="BCa",
                                   n_resamples=20_000, random_state=4).confidence_interval
    width = theirs.high - theirs.low
    assert abs(ours.low - theirs.low) < 0.03 * width
    assert abs(ours.high - theirs.high) < 0.03 * width


def test_percentile_is_the_historical_interval() -> None:
    x = np.random.default_rng(5).normal(0.0, 0.2, 150)
    old = stats.paired_bootstrap(x, np.zeros_like(x), 0.95, 4000, 7)
    new = intervals.interval(x, "percentile", 0.95, resamples=4000, seed=7)
    assert (new.low, new.high) == (old.ci_low, old.ci_high)


def test_bootstrap_t_is_wider_than_percentile_on_sparse_skewed_data() -> None:
    x = np.zeros(200)
    x[:6] = [-0.6, -0.4, -0.3, 0.05, 0.02, -0.5]
    pct = intervals.interval(x, "percentile", 0.95)
    boot_t = intervals.interval(x, "bootstrap-t", 0.95)
    assert boot_t.low < pct.low


def test_resample_with_no_spread_opens_the_bootstrap_t_interval() -> None:
    # One non-zero value in 20: many resamples are all zeros (spread 0, mean moved).
    x = np.zeros(20)
    x[0] = -1.0
    iv = intervals.interval(x, "bootstrap-t", 0.95)
    assert iv.low == -math.inf


def test_stratified_interval_is_a_macro_average() -> None:
    rng = np.random.default_rng(6)
    a, b = rng.normal(0.0, 0.05, 400), rng.normal(-0.02, 0.05, 40)
    for method in METHODS:
        iv = intervals.interval([a, b], method, 0.95, resamples=4000)
        assert iv.estimate == pytest.approx((a.mean() + b.mean()) / 2)
        assert iv.low < iv.estimate < iv.high
        # the small stratum dominates the spread: wider than pooling all queries as one
        pooled = intervals.interval(np.concatenate([a, b]), method, 0.95, resamples=4000)
        assert iv.high - iv.low > pooled.high - pooled.low


def test_constant_and_empty_inputs() -> None:
    for method in METHODS:
        iv = intervals.interval(np.full(30, -0.002), method, 0.95)
        assert (iv.low, iv.high) == (-0.002, -0.002)
        assert math.isnan(intervals.interval(np.array([]), method, 0.95).low)
    with pytest.raises(ValueError, match="unknown interval method"):
        intervals.interval(np.ones(3), "jackknife", 0.95)


def test_share_bounded_spread_widens_sparse_t_and_grows_as_the_level_shrinks() -> None:
    # 30 of 300 differ: the t interval of the combined rule takes se * sqrt(p_u / p_hat).
    k, n = 30, 300
    at_025 = intervals.share_factor(k, n, 0.025)
    p_u = scipy.stats.beta.ppf(0.975, k + 1, n - k)
    assert at_025 == pytest.approx(math.sqrt(p_u * n / k), rel=1e-9)
    assert 1.0 < at_025 < intervals.share_factor(k, n, 0.005)
    assert intervals.share_factor(60, n, 0.025) < at_025  # more non-zero values, less widening
    assert intervals.share_factor(n, n, 0.005) == 1.0  # dense: unchanged
    assert intervals.share_factor(0, n, 0.005) == 1.0
    x = np.zeros(n)
    x[:k] = np.random.default_rng(3).normal(-0.05, 0.25, k)
    combined = intervals.interval(x, "share-t-and-bootstrap-t", 0.95, resamples=2000)
    plain_t = intervals.interval(x, "t", 0.95)
    half = plain_t.estimate - plain_t.low
    assert combined.low <= combined.estimate - at_025 * half + 1e-12


def test_share_bounded_spread_leaves_dense_data_alone() -> None:
    x = np.random.default_rng(4).normal(0.0, 0.05, 200)
    combined = intervals.interval(x, "share-t-and-bootstrap-t", 0.95, resamples=2000)
    plain_t = intervals.interval(x, "t", 0.95)
    boot_t = intervals.interval(x, "bootstrap-t", 0.95, resamples=2000)
    assert combined.low == min(plain_t.low, boot_t.low)


def test_the_old_default_still_decides_as_it_did() -> None:
    """Folders decided with ``t-and-bootstrap-t`` (the default before the share-bounded
    spread) re-decide with the plain t interval: exactly the wider of t and bootstrap-t."""
    n, k = 300, 30
    x = np.zeros(n)
    x[:k] = np.random.default_rng(3).normal(-0.05, 0.25, k)
    old = intervals.interval(x, "t-and-bootstrap-t", 0.95, resamples=2000)
    new = intervals.interval(x, "share-t-and-bootstrap-t", 0.95, resamples=2000)
    plain_t = intervals.interval(x, "t", 0.95)
    boot_t = intervals.interval(x, "bootstrap-t", 0.95, resamples=2000)
    assert old.low == min(plain_t.low, boot_t.low)
    assert new.low < old.low  # sparse: the share-bounded spread widens the new default
