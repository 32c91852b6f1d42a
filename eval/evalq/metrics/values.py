"""Per-query values: what every measure produces, so any two variants can be paired."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class PerQuery:
    """``values[measure_name][i]`` is the value for ``query_ids[i]`` (float64, no NaN
    unless the measure is undefined for that query, which the measure documents)."""

    query_ids: tuple[str, ...]
    values: dict[str, np.ndarray]

    def mean(self, measure: str) -> float:
        return float(np.mean(self.values[measure])) if len(self.query_ids) else 0.0
