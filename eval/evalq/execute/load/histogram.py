"""A log-bucketed latency histogram in the manner of HdrHistogram: every sample counted.

Load tests that keep a bounded reservoir of samples, or average percentiles over time
windows, report a p99 that never happened. This histogram records every latency (in
integer microseconds) into a bucket whose width is at most ``2**-bits`` of its lower
edge, so memory stays a few thousand counters for any number of samples and every
quantile is within a known relative error:

- values below ``2**bits`` µs are stored exactly (one bucket per microsecond);
- above, a value ``v`` with ``L = v.bit_length()`` keeps its top ``bits`` bits: the bucket
  is ``[m << e, (m + 1) << e)`` with ``e = L - bits``, and the reported value is the
  bucket's midpoint, so the error is at most half a bucket: ``|reported - v| / v <
  2**-bits``. With the default ``bits = 8`` that is 0.39%.

Quantiles use the nearest-rank definition (the smallest recorded value with at least
``q·n`` samples at or below it), the one HdrHistogram and ``numpy.percentile(...,
method="inverted_cdf")`` use. Min, max, count and the exact sum are kept beside the
buckets, so ``max`` is exact.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_BITS = 8


@dataclass
class LatencyHistogram:
    bits: int = DEFAULT_BITS
    counts: dict[int, int] = field(default_factory=dict)  # bucket index -> samples
    count: int = 0
    total_us: int = 0
    min_us: int | None = None
    max_us: int | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.bits <= 20:
            raise ValueError(f"bits must be in 1..20, got {self.bits}")

    @property
    def relative_error(self) -> float:
        """Upper bound on |reported - true| / true for any quantile."""
        return 2.0**-self.bits

    # -- recording -----------------------------------------------------------------------
    def _index(self, value: int) -> int:
        exact = 1 << self.bits
        if value < exact:
            return value
        e = value.bit_length() - self.bits
        m = value >> e  # in [2**(bits-1), 2**bits)
        half = 1 << (self.bits - 1)
        return exact + (e - 1) * half + (m - half)

    def _bounds(self, index: int) -> tuple[int, int]:
        """The bucket's values as [low, high) in µs."""
        exact = 1 << self.bits
        if index < exact:
            return index, index + 1
        half = 1 << (self.bits - 1)
        e = (index - exact) // half + 1
        m = (index - exact) % half + half
        return m << e, (m + 1) << e

    def _value(self, index: int) -> float:
        low, high = self._bounds(index)
        return float(low) if high - low == 1 else (low + high - 1) / 2.0

    def record_us(self, value: int, times: int = 1) -> None:
        if value < 0:
            raise ValueError(f"latency must be non-negative, got {value} µs")
        value = int(value)
        idx = self._index(value)
        self.counts[idx] = self.counts.get(idx, 0) + times
        self.count += times
        self.total_us += value * times
        self.min_us = value if self.min_us is None else min(self.min_us, value)
        self.max_us = value if self.max_us is None else max(self.max_us, value)

    def record_s(self, seconds: float) -> None:
        self.record_us(max(0, round(seconds * 1e6)))

    def merge(self, other: LatencyHistogram) -> LatencyHistogram:
        if other.bits != self.bits:
            raise ValueError("cannot merge histograms of different precision")
        for idx, n in other.counts.items():
            self.counts[idx] = self.counts.get(idx, 0) + n
        self.count += other.count
        self.total_us += other.total_us
        for v in (other.min_us, other.max_us):
            if v is not None:
                self.min_us = v if self.min_us is None else min(self.min_us, v)
                self.max_us = v if self.max_us is None else max(self.max_us, v)
        return self

    # -- reading -------------------------------------------------------------------------
    def quantile_us(self, q: float) -> float | None:
        """Nearest-rank quantile; ``None`` when empty. q=1 is the exact max."""
        if not 0 <= q <= 1:
            raise ValueError(f"quantile must be in [0, 1], got {q}")
        if self.count == 0:
            return None
        if q >= 1:
            return float(self.max_us)  # type: ignore[arg-type]
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for idx in sorted(self.counts):
            seen += self.counts[idx]
            if seen >= rank:
                value = self._value(idx)
                # never report outside what was recorded
                return min(max(value, float(self.min_us)), float(self.max_us))  # type: ignore[arg-type]
        return float(self.max_us)  # type: ignore[arg-type]  # pragma: no cover

    def quantile_ms(self, q: float) -> float | None:
        v = self.quantile_us(q)
        return None if v is None else v / 1000.0

    @property
    def mean_ms(self) -> float | None:
        return None if self.count == 0 else self.total_us / self.count / 1000.0

    def summary_ms(self) -> dict[str, float | None]:
        return {
            "p50": self.quantile_ms(0.50), "p90": self.quantile_ms(0.90),
            "p95": self.quantile_ms(0.95), "p99": self.quantile_ms(0.99),
            "max": self.quantile_ms(1.0),
            "mean": self.mean_ms,
            "min": None if self.min_us is None else self.min_us / 1000.0,
        }  # fmt: skip

    # -- storage -------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Compact JSON: ``buckets`` are ``[low_us, high_us, count]`` rows, ascending."""
        return {
            "bits": self.bits, "count": self.count, "total_us": self.total_us,
            "min_us": self.min_us, "max_us": self.max_us,
            "buckets": [[*self._bounds(i), self.counts[i]] for i in sorted(self.counts)],
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LatencyHistogram:
        hist = cls(bits=int(data["bits"]))
        for low, _high, n in data["buckets"]:
            hist.counts[hist._index(int(low))] = int(n)
        hist.count = int(data["count"])
        hist.total_us = int(data["total_us"])
        hist.min_us = data["min_us"]
        hist.max_us = data["max_us"]
        return hist

    @classmethod
    def of_seconds(cls, values: Iterable[float], bits: int = DEFAULT_BITS) -> LatencyHistogram:
        hist = cls(bits=bits)
        for v in values:
            hist.record_s(v)
        return hist
