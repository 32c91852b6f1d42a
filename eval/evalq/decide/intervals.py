"""Interval methods for a mean per-query difference, and the sparse-data rule.

Why several methods: the percentile bootstrap (evalq's first method) is too narrow for
sparse, skewed samples, which is exactly what a near-lossless quantization produces (most
per-query differences exactly 0, a few large ones). ``bench/calibration.py`` measures
every method here on real and synthetic populations placed at the margin boundary; the
default (:data:`evalq.core.gates.DEFAULT_METHOD`: a gate's value names its method) is the
one whose false-pass rate stays at the nominal level on the whole panel. README "Gate
calibration" has the figures.

Methods (all for the mean; ``strata`` > 1 means a macro-average of per-stratum means,
resampled within each stratum):

* ``percentile``   quantiles of the bootstrap means (kept for comparison and for results
  written before methods existed);
* ``bootstrap-t``  studentized bootstrap: quantiles of t* = (mean* − mean) / se*, the bound
  is mean − t*_q · se. A resample whose spread is 0 while its mean moved gives t* = ±inf:
  the interval opens rather than pretending;
* ``bca``          bias-corrected and accelerated percentile bootstrap (Efron 1987), the
  acceleration from the closed-form jackknife of the mean;
* ``t``            Student t interval, mean ± t_{df} · se (Welch–Satterthwaite df for
  strata);
* ``t-and-bootstrap-t``  the wider of the two: a pass needs both to clear the margin, so
  its false-pass rate is at most the smaller of theirs on every population (the t
  interval is the safe one on heavy tails, the studentized bootstrap on skewed sparse
  data; the calibration table shows each failing where the other holds). The default
  until the share-bounded spread; kept so folders it decided re-decide the same;
* ``share-t-and-bootstrap-t``  the same, with the t interval taking the **share-bounded
  spread** (:func:`share_factor`) on sparse data: the default.

The share-bounded spread: the spread of a sparse difference is the share of queries that
differ times the mean square of those that do. A sample that by chance holds fewer
non-zero values than its population understates the drop and its spread *together*, so
the interval is short in exactly the draws that pass: on 10% non-zero differences the
plain rule passed 1.5 times its nominal rate at one-sided 0.025 and 3 times at 0.005
(the level a family of 5 asks of each member). The combined rule's t interval therefore
scales the standard error by √(p_u / p̂), p̂ the observed share of non-zero differences
and p_u its exact (Clopper–Pearson) upper bound at the gate's own one-sided level, the
bound the sparse-data rule already uses. It widens more as the level shrinks and as the
non-zero count falls, and is exactly 1 when every difference is non-zero (dense data
decide as before).

The formulas take moments and bootstrap replicates as arrays with a leading "trials" axis,
so the calibration harness evaluates thousands of simulated gates in one call with the
exact code the gate runs.

The sparse-data rule (:func:`nonzero_rate_bound`): when fewer than ``min_nonzero``
differences are non-zero no interval is trusted. The gate then uses only what is certain
about a measure in [0, 1]: a difference is at least −1, so the mean drop is at most the
share of queries that differ, and that share has an exact (Clopper–Pearson) upper bound.
It certifies identical runs once there are enough queries and declares everything else
inconclusive.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np

from evalq.core.gates import METHODS, Method

_BLOCK_ELEMENTS = 2_000_000
_NORMAL = NormalDist()


@dataclass(frozen=True)
class Interval:
    """A two-sided interval of a (macro-)mean at ``confidence``; ``se`` is the standard
    error the studentized methods use."""

    estimate: float
    low: float
    high: float
    se: float
    n: int
    method: str
    confidence: float


def check_method(method: str) -> Method:
    if method not in METHODS:
        raise ValueError(f"unknown interval method {method!r}; choose from {', '.join(METHODS)}")
    return method  # type: ignore[return-value]


# -- distributions (no scipy at run time) ------------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c if abs(1.0 + aa / c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def beta_cdf(x: float, a: float, b: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def _bisect(f: object, target: float, lo: float, hi: float) -> float:
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if f(mid) < target:  # type: ignore[operator]
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-12 * max(1.0, abs(mid)):
            break
    return 0.5 * (lo + hi)


def beta_ppf(p: float, a: float, b: float) -> float:
    return _bisect(lambda x: beta_cdf(x, a, b), p, 0.0, 1.0)


def t_cdf(t: float, df: float) -> float:
    x = df / (df + t * t)
    tail = 0.5 * beta_cdf(x, df / 2.0, 0.5)
    return 1.0 - tail if t > 0 else tail


@lru_cache(maxsize=4096)
def t_ppf(p: float, df: float) -> float:
    """Quantile of Student's t with ``df`` degrees of freedom (bisection on the cdf)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"probability must lie in (0, 1), got {p}")
    if not df > 0:
        return math.nan
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -t_ppf(1.0 - p, df)
    hi = 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    return _bisect(lambda t: t_cdf(t, df), p, 0.0, hi)


@lru_cache(maxsize=65536)
def nonzero_rate_bound(nonzero: int, n: int, alpha: float) -> float:
    """Exact one-sided (Clopper–Pearson) upper ``1 − alpha`` bound on the share of
    queries whose difference is non-zero, having seen ``nonzero`` of ``n``."""
    if n <= 0:
        return 1.0
    if nonzero >= n:
        return 1.0
    if nonzero == 0:
        return 1.0 - math.pow(alpha, 1.0 / n)
    return beta_ppf(1.0 - alpha, nonzero + 1.0, float(n - nonzero))


def share_factor(nonzero: int, n: int, alpha: float) -> float:
    """√(p_u / p̂): the share-bounded spread's factor on the standard error (see the
    module docstring); 1 when nothing or everything differs."""
    if nonzero <= 0 or nonzero >= n:
        return 1.0
    return math.sqrt(nonzero_rate_bound(nonzero, n, alpha) * n / nonzero)


def queries_to_certify_identical(margin: float, alpha: float) -> int | None:
    """Queries with all differences 0 that the sparse-data rule needs to certify
    ``margin`` (rule of three, exact): smallest n with 1 − alpha^(1/n) <= margin."""
    if not 0.0 < margin < 1.0:
        return None if margin <= 0.0 else 1
    return max(1, math.ceil(math.log(alpha) / math.log1p(-margin)))


# -- vectorized formulas (leading axis: trials) ---------------------------------------

def _sorted_quantile(sorted_rows: np.ndarray, levels: np.ndarray) -> np.ndarray:
    """numpy's linear-interpolation quantile of each sorted row at its own level."""
    b = sorted_rows.shape[1]
    pos = np.clip(levels, 0.0, 1.0) * (b - 1)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, b - 1)
    frac = pos - lo
    rows = np.arange(sorted_rows.shape[0])
    a, c = sorted_rows[rows, lo], sorted_rows[rows, hi]
    with np.errstate(invalid="ignore"):
        out = a + (c - a) * frac
    return np.where(frac == 0.0, a, out)


def bounds(
    method: str,
    confidence: float,
    estimate: np.ndarray,
    se: np.ndarray,
    df: np.ndarray,
    boot_means: np.ndarray | None = None,
    boot_se: np.ndarray | None = None,
    accel: np.ndarray | None = None,
    t_se: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper bounds for each trial (rows). ``boot_means``/``boot_se`` are
    (trials, resamples); ``accel`` is the BCa acceleration per trial; ``t_se`` is the
    share-bounded standard error the combined rule's t interval takes (``se`` if None)."""
    tail = (1.0 - confidence) / 2.0
    estimate = np.asarray(estimate, dtype=np.float64)
    if method in ("t-and-bootstrap-t", "share-t-and-bootstrap-t"):
        shared = method == "share-t-and-bootstrap-t" and t_se is not None
        se_t = t_se if shared and t_se is not None else se  # the share-bounded spread
        t_low, t_high = bounds("t", confidence, estimate, se_t, df)
        b_low, b_high = bounds("bootstrap-t", confidence, estimate, se, df, boot_means, boot_se)
        return np.fmin(t_low, b_low), np.fmax(t_high, b_high)
    if method == "t":
        flat = np.ravel(np.asarray(df, dtype=np.float64))
        unique = {float(d): t_ppf(1.0 - tail, float(d)) if d > 0 else math.nan
                  for d in np.unique(flat)}
        q = np.array([unique[float(d)] for d in flat]).reshape(np.shape(df))
        return estimate - q * se, estimate + q * se
    assert boot_means is not None
    if method == "percentile":
        low, high = np.quantile(boot_means, [tail, 1.0 - tail], axis=1)
        return low, high
    if method == "bootstrap-t":
        assert boot_se is not None
        with np.errstate(divide="ignore", invalid="ignore"):
            t_star = (boot_means - estimate[:, None]) / boot_se
        # 0/0: the resample repeated the sample's mean exactly with no spread.
        t_star = np.where(np.isnan(t_star), 0.0, t_star)
        t_star.sort(axis=1)
        b = t_star.shape[1]
        # Order statistics, conservative side: no interpolation across an infinity.
        upper_q = t_star[:, min(b - 1, math.ceil((b + 1) * (1.0 - tail)) - 1)]
        lower_q = t_star[:, max(0, math.floor((b + 1) * tail) - 1)]
        with np.errstate(invalid="ignore"):
            low = estimate - upper_q * se
            high = estimate - lower_q * se
        return np.where(np.isnan(low), -np.inf, low), np.where(np.isnan(high), np.inf, high)
    if method == "bca":
        assert accel is not None
        b = boot_means.shape[1]
        below = np.count_nonzero(boot_means < estimate[:, None], axis=1)
        at_or_below = np.count_nonzero(boot_means <= estimate[:, None], axis=1)
        share = (below + at_or_below) / (2.0 * b)
        inv = np.vectorize(lambda p: _NORMAL.inv_cdf(p) if 0.0 < p < 1.0 else math.nan)
        z0 = inv(share) if share.size else share
        levels = []
        for z_tail in (_NORMAL.inv_cdf(tail), _NORMAL.inv_cdf(1.0 - tail)):
            zz = z0 + z_tail
            with np.errstate(invalid="ignore", divide="ignore"):
                adj = z0 + zz / (1.0 - accel * zz)
            levels.append(np.array([_NORMAL.cdf(v) if math.isfinite(v) else math.nan
                                    for v in adj]))
        ordered = np.sort(boot_means, axis=1)
        low = _sorted_quantile(ordered, np.nan_to_num(levels[0], nan=0.0))
        high = _sorted_quantile(ordered, np.nan_to_num(levels[1], nan=1.0))
        # All resamples on one side of the estimate: BCa is undefined; open the interval.
        broken = ~np.isfinite(z0)
        return np.where(broken, -np.inf, low), np.where(broken, np.inf, high)
    raise ValueError(f"unknown interval method {method!r}")


# -- one sample or a few strata (the gate) -----------------------------------------------

def _stratum_moments(strata: Sequence[np.ndarray]) -> tuple[float, float, float]:
    """Macro mean, its standard error and Welch–Satterthwaite df."""
    k = len(strata)
    means = [float(s.mean()) for s in strata]
    parts = [float(np.var(s, ddof=1)) / s.size / k**2 if s.size > 1 else math.nan
             for s in strata]
    var = sum(parts)
    df_den = sum(p * p / (s.size - 1) for p, s in zip(parts, strata) if s.size > 1)
    df = var * var / df_den if df_den > 0 else math.nan
    if k == 1:
        df = float(strata[0].size - 1)
    return sum(means) / k, math.sqrt(var) if var >= 0 else math.nan, df


def _share_se(strata: Sequence[np.ndarray], alpha: float) -> float:
    """The standard error of the macro mean with each stratum's variance scaled by its
    :func:`share_factor` squared (the share-bounded spread)."""
    k = len(strata)
    var = 0.0
    for s in strata:
        if s.size > 1:
            factor = share_factor(int(np.count_nonzero(s)), s.size, alpha)
            var += float(np.var(s, ddof=1)) / s.size / k**2 * factor**2
    return math.sqrt(var)


def _accel(strata: Sequence[np.ndarray]) -> float:
    """BCa acceleration from the jackknife of the macro mean (closed form: deleting query
    i of stratum d moves the estimate by (x_i − mean_d) / ((n_d − 1) · k))."""
    k = len(strata)
    u = np.concatenate([(s - s.mean()) / ((s.size - 1) * k) for s in strata if s.size > 1])
    den = float(np.sum(u * u))
    return float(np.sum(u**3)) / (6.0 * den**1.5) if den > 0 else 0.0


def _resample_moments(
    strata: Sequence[np.ndarray], resamples: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Macro means and standard errors of ``resamples`` stratified bootstrap resamples.

    One stratum draws exactly like :func:`evalq.decide.stats._bootstrap_means` (same generator,
    same blocks), so a percentile interval is the one evalq has always computed.
    """
    rng = np.random.default_rng(seed)
    k = len(strata)
    means = np.zeros(resamples)
    var = np.zeros(resamples)
    for s in strata:
        n = s.size
        rows = max(1, _BLOCK_ELEMENTS // n)
        for start in range(0, resamples, rows):
            stop = min(resamples, start + rows)
            draw = s[rng.integers(0, n, size=(stop - start, n))]
            m = draw.mean(axis=1)
            means[start:stop] += m / k
            if n > 1:
                var[start:stop] += draw.var(axis=1, ddof=1) / n / k**2
    return means, np.sqrt(var)


def interval(
    strata: Sequence[np.ndarray] | np.ndarray,
    method: str,
    confidence: float,
    resamples: int = 10_000,
    seed: int = 0,
) -> Interval:
    """Interval of the mean (one array) or of the macro-average of per-stratum means
    (a list of arrays, each resampled within itself). Constant data collapse the
    interval onto the constant; an empty stratum gives NaN."""
    check_method(method)
    groups = [np.asarray(strata, dtype=np.float64)] if isinstance(strata, np.ndarray) \
        else [np.asarray(s, dtype=np.float64).ravel() for s in strata]
    n = sum(s.size for s in groups)
    if not groups or any(s.size == 0 for s in groups):
        return Interval(math.nan, math.nan, math.nan, math.nan, n, method, confidence)
    estimate, se, df = _stratum_moments(groups)
    if all(s.size == 1 or np.all(s == s[0]) for s in groups):
        # Every resample is the same value: the interval is that value, exactly.
        estimate = sum(float(s[0]) for s in groups) / len(groups)
        return Interval(estimate, estimate, estimate, 0.0, n, method, confidence)
    est = np.array([estimate])
    if method == "t":
        low, high = bounds("t", confidence, est, np.array([se]), np.array([df]))
    else:
        means, ses = _resample_moments(groups, resamples, seed)
        t_se = (np.array([_share_se(groups, (1.0 - confidence) / 2.0)])
                if method == "share-t-and-bootstrap-t" else None)
        low, high = bounds(method, confidence, est, np.array([se]), np.array([df]),
                           means[None, :], ses[None, :], np.array([_accel(groups)]), t_se)
    return Interval(estimate, float(low[0]), float(high[0]), se, n, method, confidence)
