"""`evalq compare`'s statistics: per dataset, variant and measure, the mean difference
B − A of the stored per-query values (paired by query id, see
:class:`~evalq.core.comparison.PairedValues`) gets a paired bootstrap interval and a
randomization p-value (``evalq.decide.stats``, with A's recipe's confidence, resamples and
seed). A difference counts as *changed* when its interval excludes 0; values equal on
every query are *identical*. The report (:mod:`evalq.report.compare`) reads the pairs
from the two folders and renders the differences computed here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from evalq.core.comparison import Change, MetricDiff, PairedValues
from evalq.decide import stats


def metric_diff(pair: PairedValues, s: Mapping[str, Any]) -> MetricDiff:
    """The paired difference B − A of one measure; ``s`` is A's recipe's ``stats``."""
    ds, variant, metric = pair.dataset, pair.variant, pair.metric
    va, vb = pair.a, pair.b
    ok = np.isfinite(va) & np.isfinite(vb)
    n = int(ok.sum())
    if n == 0:
        nan = math.nan
        return MetricDiff(ds, variant, metric, 0, nan, nan, nan, nan, nan, nan, "undefined")
    va, vb = va[ok], vb[ok]
    confidence = float(s.get("confidence", 0.95))
    resamples, seed = int(s.get("resamples", 10_000)), int(s.get("seed", 0))
    diff = stats.paired_bootstrap(vb, va, confidence, resamples, seed)
    p = stats.randomization_test(vb, va, resamples, seed)
    change: Change
    if np.array_equal(va, vb):
        change = "identical"
    elif diff.ci_low > 0:
        change = "higher"
    elif diff.ci_high < 0:
        change = "lower"
    else:
        change = "within noise"
    undefined = int(len(ok) - n)
    if undefined and change != "identical":
        change = "undefined"
    return MetricDiff(ds, variant, metric, n, diff.reference_mean, diff.candidate_mean,
                      diff.delta, diff.ci_low, diff.ci_high, p, change)


def metric_diffs(pairs: list[PairedValues], s: Mapping[str, Any]) -> list[MetricDiff]:
    """Every pair's difference, in the pairs' order."""
    return [metric_diff(pair, s) for pair in pairs]
