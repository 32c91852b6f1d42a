"""Paired statistics over per-query values: bootstrap intervals, randomization tests, MDE.

Why paired: every variant is scored on the same queries, and query difficulty varies far
more than the effect of a quantization. Differencing per query (candidate − reference)
removes that shared variance, so a few hundred queries can certify a drop of a point of
nDCG that unpaired intervals would never resolve.

All resampling is seeded (``numpy.random.Generator``) and drawn in chunks of rows whose
size depends only on ``n``, so the same inputs always give the same numbers: a gate
re-decided from stored per-query values reaches the same verdict.

Edge cases return documented values instead of NaN warnings:

* ``n == 0``: estimates and bounds are ``nan`` (explicitly, no warning), ``sd`` is ``nan``,
  the randomization p-value is 1.0 (no evidence of a difference), the MDE is ``inf``.
* ``n == 1``: the estimate is the single value; every resample equals it, so the
  bootstrap interval collapses onto it; ``sd`` is ``nan`` (undefined with one value) and
  the MDE is ``inf``: one query cannot detect anything.
* constant values (``sd == 0``): the interval collapses onto the constant; the MDE is 0.
  If all differences are exactly zero the randomization p-value is 1.0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

# Upper bound on the elements of one (rows, n) resampling block: ~16 MB of int64
# indices, so 10,000 resamples of 100,000 queries never need 8 GB at once.
_BLOCK_ELEMENTS = 2_000_000


@dataclass(frozen=True)
class PairedDiff:
    """Mean paired difference ``delta = mean(candidate − reference)`` with its
    percentile-bootstrap interval at ``confidence``."""

    n: int
    delta: float
    ci_low: float
    ci_high: float
    confidence: float
    resamples: int
    seed: int
    sd: float  # sample standard deviation (ddof=1) of the per-query differences
    candidate_mean: float
    reference_mean: float


@dataclass(frozen=True)
class MeanCI:
    """Mean of one sample of per-query values with its percentile-bootstrap interval."""

    n: int
    mean: float
    ci_low: float
    ci_high: float
    confidence: float
    resamples: int
    seed: int
    sd: float  # sample standard deviation (ddof=1); nan for n < 2


def _as_vector(values: np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    return array


def _paired(candidate: np.ndarray, reference: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both sides as float64 vectors of one length: a pair is one query's two values."""
    cand = _as_vector(candidate, "candidate")
    ref = _as_vector(reference, "reference")
    if cand.shape != ref.shape:
        raise ValueError(
            f"paired values need equal lengths, got {cand.size} candidate and {ref.size} reference"
        )
    return cand, ref


def _check_confidence(confidence: float) -> None:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie strictly between 0 and 1, got {confidence}")


def _sample_sd(values: np.ndarray) -> float:
    if values.size < 2:
        return math.nan
    if np.all(values == values[0]):
        return 0.0  # exactly: np.std of a constant can be 1e-17 from rounding the mean
    return float(np.std(values, ddof=1))


def _bootstrap_means(values: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Means of ``resamples`` bootstrap resamples of ``values`` (n >= 1), drawn in blocks."""
    n = values.size
    rng = np.random.default_rng(seed)
    rows = max(1, _BLOCK_ELEMENTS // n)
    means = np.empty(resamples, dtype=np.float64)
    for start in range(0, resamples, rows):
        stop = min(resamples, start + rows)
        index = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = values[index].mean(axis=1)
    return means


def _percentile_interval(
    values: np.ndarray, confidence: float, resamples: int, seed: int
) -> tuple[float, float]:
    if values.size == 0:
        return math.nan, math.nan
    if values.size == 1 or np.all(values == values[0]):
        # Every resample is the same value: the interval is that value, exactly.
        return float(values[0]), float(values[0])
    means = _bootstrap_means(values, resamples, seed)
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [tail, 1.0 - tail])
    return float(low), float(high)


def paired_bootstrap(
    candidate: np.ndarray,
    reference: np.ndarray,
    confidence: float = 0.95,
    resamples: int = 10_000,
    seed: int = 0,
) -> PairedDiff:
    """Percentile bootstrap of the mean per-query difference ``candidate − reference``.

    ``candidate[i]`` and ``reference[i]`` must belong to the same query. Resampling
    queries (not values of each variant separately) keeps the pairing. The interval is
    the (1−c)/2 and (1+c)/2 quantiles of the resampled means (numpy's linear
    interpolation). NaN inputs propagate to NaN outputs; callers that gate reject NaN
    first so that a broken query is reported, not averaged away.
    """
    _check_confidence(confidence)
    cand, ref = _paired(candidate, reference)
    diffs = cand - ref
    n = int(diffs.size)
    if n == 0:
        nan = math.nan
        return PairedDiff(0, nan, nan, nan, confidence, resamples, seed, nan, nan, nan)
    low, high = _percentile_interval(diffs, confidence, resamples, seed)
    return PairedDiff(
        n=n,
        delta=float(diffs.mean()),
        ci_low=low,
        ci_high=high,
        confidence=confidence,
        resamples=resamples,
        seed=seed,
        sd=_sample_sd(diffs),
        candidate_mean=float(cand.mean()),
        reference_mean=float(ref.mean()),
    )


def bootstrap_mean_ci(
    values: np.ndarray, confidence: float = 0.95, resamples: int = 10_000, seed: int = 0
) -> MeanCI:
    """Percentile bootstrap interval of the mean of one sample (reference measures such as
    overlap@10, whose per-query values are already a comparison with the reference)."""
    _check_confidence(confidence)
    array = _as_vector(values, "values")
    if array.size == 0:
        nan = math.nan
        return MeanCI(0, nan, nan, nan, confidence, resamples, seed, nan)
    low, high = _percentile_interval(array, confidence, resamples, seed)
    return MeanCI(
        n=int(array.size),
        mean=float(array.mean()),
        ci_low=low,
        ci_high=high,
        confidence=confidence,
        resamples=resamples,
        seed=seed,
        sd=_sample_sd(array),
    )


# With at most this many sign patterns, enumerate them all: an exact p-value is cheaper
# than 10,000 random draws and has no Monte Carlo error.
_EXACT_LIMIT_BITS = 13


def randomization_test(
    candidate: np.ndarray, reference: np.ndarray, resamples: int = 10_000, seed: int = 0
) -> float:
    """Two-sided paired randomization (sign-flip) test of ``mean(candidate − reference) = 0``.

    Under the null each query's difference is as likely to have either sign. The p-value
    is the share of sign patterns whose |mean| is at least the observed |mean|. With
    ``2**n <= resamples`` (n <= 13 at the default) every pattern is enumerated and the
    p-value is exact; otherwise ``resamples`` random patterns are drawn and the
    p-value is ``(1 + hits) / (1 + resamples)`` (the +1 counts the observed pattern, so
    the estimate is never 0 and the test keeps its size). Identical inputs give 1.0.
    """
    cand, ref = _paired(candidate, reference)
    diffs = cand - ref
    n = int(diffs.size)
    if n == 0 or np.all(diffs == 0.0):
        return 1.0
    total = float(diffs.sum())
    observed = abs(total)
    # Sums of floats in another order differ in the last bits; a pattern that reproduces
    # the observed statistic must count as "at least as extreme".
    threshold = observed - 1e-9 * max(1.0, observed)
    if n <= _EXACT_LIMIT_BITS and 2**n <= resamples:
        patterns = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1).astype(np.float64)
        stats = np.abs((1.0 - 2.0 * patterns) @ diffs)
        return float(np.mean(stats >= threshold))
    rng = np.random.default_rng(seed)
    rows = max(1, _BLOCK_ELEMENTS // n)
    hits = 0
    for start in range(0, resamples, rows):
        count = min(resamples, start + rows) - start
        # A pattern flips the differences where its bit is 1: sum = total − 2·(bits @ d).
        flips = rng.integers(0, 2, size=(count, n), dtype=np.int8).astype(np.float64)
        hits += int(np.count_nonzero(np.abs(total - 2.0 * (flips @ diffs)) >= threshold))
    return (1.0 + hits) / (1.0 + resamples)


def _z(probability: float) -> float:
    return NormalDist().inv_cdf(probability)


def minimum_detectable_effect(diffs: np.ndarray, alpha: float, power: float = 0.8) -> float:
    """Smallest mean difference a one-sided paired test at level ``alpha`` detects with
    probability ``power``, for this many queries and this spread of differences:

        MDE = (z_{1−alpha} + z_{power}) · sd(diffs) / sqrt(n)

    (normal approximation, ``sd`` with ddof=1). For a non-inferiority gate whose
    interval has confidence c, pass ``alpha = (1 − c) / 2`` (the lower bound of a
    two-sided c interval is a one-sided (1+c)/2 bound): the MDE is then the smallest
    margin that a candidate truly equal to the reference clears with that power.
    Returns ``inf`` for n < 2 (the spread is unknown) and 0.0 for constant differences.
    """
    if not 0.0 < alpha < 1.0 or not 0.0 < power < 1.0:
        raise ValueError(f"alpha and power must lie in (0, 1), got {alpha} and {power}")
    array = _as_vector(diffs, "diffs")
    if array.size < 2:
        return math.inf
    return (_z(1.0 - alpha) + _z(power)) * _sample_sd(array) / math.sqrt(array.size)


def queries_needed(sd: float, effect: float, alpha: float, power: float = 0.8) -> int | None:
    """Queries a one-sided paired test at level ``alpha`` needs to detect ``effect`` with
    ``power`` when differences have standard deviation ``sd`` (inverse of the MDE):
    ``ceil(((z_{1−alpha} + z_{power}) · sd / effect)²)``. ``None`` when ``effect <= 0``
    or ``sd`` is not finite (no number of queries would do)."""
    if effect <= 0.0 or not math.isfinite(sd) or not math.isfinite(effect):
        return None
    if sd == 0.0:
        return 1
    return max(1, math.ceil(((_z(1.0 - alpha) + _z(power)) * sd / effect) ** 2))
