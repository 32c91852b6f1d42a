"""What `evalq compare` pairs and what it finds, as values: the stored per-query values
of two runs paired by query id (read by the report), and the paired difference of each
(computed by the command, :mod:`evalq.execute.compare`). The report renders the
differences it is given; it computes no statistic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

Change = Literal["identical", "within noise", "higher", "lower", "undefined"]


@dataclass(frozen=True)
class PairedValues:
    """One measure of one variant on one dataset in runs A and B: the stored per-query
    values of the queries both hold, in A's order (NaN where a value is undefined)."""

    dataset: str
    variant: str
    metric: str
    a: np.ndarray
    b: np.ndarray


@dataclass(frozen=True)
class MetricDiff:
    dataset: str
    variant: str
    metric: str
    n: int
    a: float
    b: float
    delta: float
    ci_low: float
    ci_high: float
    p_value: float
    change: Change
