"""The range every per-query value of a measure family lies in (issue 32).

A results folder's per-query files are read back by ``evalq gate``, ``evalq compare`` and
the report, and a hand-edited or damaged value inside JSON's number syntax (an nDCG@10
of 2.0, a recall of -0.3) would move a gate without a word. Each family's range is
declared here, once, keyed by the family's canonical name (the prefix of every stored
column: ``nDCG@10``, ``RBO(p=0.8)@100``, ``cosine``), because the readers
(``evalq.results``, ``evalq.report``) sit beside or above the measure registry without
importing it; ``evalq.measure.measures.Family.bounds`` reads the same table, and a
project test requires every registered family to be listed.
"""

from __future__ import annotations

import math
import re

UNIT = (0.0, 1.0)  # shares, gains normalized by their ideal, reciprocal ranks
SIGNED = (-1.0, 1.0)  # cosines and rank correlations
NON_NEGATIVE = (0.0, math.inf)  # distances between scores

# Float arithmetic may land a hair outside (an nDCG of 1.0000000000000002, a cosine of a
# vector with itself): a value further out than this is not a rounding.
SLACK = 1e-6

RANGES: dict[str, tuple[float, float]] = {
    # against qrels
    "nDCG": UNIT, "R": UNIT, "P": UNIT, "RR": UNIT, "AP": UNIT,
    # against the reference's run
    "overlap": UNIT, "refnDCG": UNIT, "RBO": UNIT, "tau": SIGNED, "cosine": SIGNED,
    # against the reference reranker's scores
    "score_tau": SIGNED, "score_spearman": SIGNED, "rerank_overlap": UNIT,
    "tie_rate": UNIT, "abs_delta": NON_NEGATIVE, "abs_delta_p99": NON_NEGATIVE,
    "score_shift": NON_NEGATIVE,
}

_FAMILY = re.compile(r"[A-Za-z][A-Za-z0-9_\-]*")


def value_range(column: str) -> tuple[float, float] | None:
    """The range of a stored per-query column's values; None for a column that is no
    registered family's (nothing is known about it, so nothing is refused)."""
    match = _FAMILY.match(column)
    return RANGES.get(match.group(0)) if match else None


def outside(value: float, bounds: tuple[float, float]) -> bool:
    """Whether ``value`` lies outside ``bounds`` by more than :data:`SLACK` (NaN, an
    undefined value, is never outside)."""
    return value < bounds[0] - SLACK or value > bounds[1] + SLACK
