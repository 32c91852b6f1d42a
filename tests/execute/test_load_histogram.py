"""The latency histogram keeps every sample and its quantiles stay within the stated
relative error of the exact nearest-rank quantiles of the raw samples."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalq.execute.load.histogram import LatencyHistogram

QUANTILES = (0.0, 0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0)


@pytest.mark.parametrize("bits", [4, 8, 11])
def test_quantiles_within_the_error_bound_on_heavy_tailed_latencies(bits: int) -> None:
    rng = np.random.default_rng(bits)
    values = np.round(rng.lognormal(mean=10, sigma=1.5, size=50_000)).astype(np.int64)
    ordered = np.sort(values)
    hist = LatencyHistogram(bits=bits)
    for v in values:
        hist.record_us(int(v))
    assert hist.count == len(values)  # no sample dropped
    assert hist.max_us == values.max() and hist.min_us == values.min()
    assert hist.total_us == values.sum()
    for q in QUANTILES:
        exact = float(ordered[max(1, math.ceil(q * len(values))) - 1])  # nearest rank
        got = hist.quantile_us(q)
        assert got is not None
        assert abs(got - exact) <= exact * hist.relative_error + 1e-9, (q, got, exact)
    assert hist.quantile_us(1.0) == values.max()


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=10**12), st.integers(min_value=1, max_value=14))
def test_every_value_lands_in_a_bucket_that_contains_it(value: int, bits: int) -> None:
    hist = LatencyHistogram(bits=bits)
    idx = hist._index(value)
    low, high = hist._bounds(idx)
    assert low <= value < high
    assert abs(hist._value(idx) - value) <= value * 2.0**-bits + 1e-9


def test_small_values_are_exact_and_empty_is_none() -> None:
    hist = LatencyHistogram(bits=8)
    assert hist.quantile_us(0.5) is None and hist.summary_ms()["p99"] is None
    for v in (3, 3, 7, 200):
        hist.record_us(v)
    assert hist.quantile_us(0.5) == 3 and hist.quantile_us(0.75) == 7
    assert hist.quantile_us(1.0) == 200


def test_merge_and_round_trip_keep_every_count() -> None:
    rng = np.random.default_rng(0)
    a = LatencyHistogram.of_seconds(rng.exponential(0.05, 1000))
    b = LatencyHistogram.of_seconds(rng.exponential(0.5, 1000))
    both = LatencyHistogram()
    both.merge(a).merge(b)
    assert both.count == 2000 and both.max_us == max(a.max_us, b.max_us)
    copy = LatencyHistogram.from_dict(both.to_dict())
    assert copy.to_dict() == both.to_dict()
    for q in QUANTILES:
        assert copy.quantile_us(q) == both.quantile_us(q)
    with pytest.raises(ValueError):
        both.record_us(-1)
    with pytest.raises(ValueError):
        LatencyHistogram(bits=4).merge(a)
