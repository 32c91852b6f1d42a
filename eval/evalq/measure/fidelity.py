"""Reranker fidelity: a candidate reranker against the reference reranker, on *identical*
candidate lists (the reference first stage's top N), per query.

Why on identical lists: a pipeline's end metric mixes what the first stage found with how
the reranker ordered it. Scoring the same (query, document) pairs with both rerankers
isolates the reranker's own change, and sees every candidate, judged or not.

* ``score_tau``: Kendall's tau-b between the two score vectors of a query (ties
  corrected, as ``scipy.stats.kendalltau``).
* ``score_spearman``: Spearman's rho of the same.
* ``rerank_overlap@k``: share of the reference reranker's top k that the candidate also
  puts in its top k (trec_eval order: ties by document id, descending).
* ``abs_delta``, ``abs_delta_p99``: mean and 99th percentile of |candidate − reference|
  over the query's pairs (lower is better).
* ``score_shift``: the Wasserstein-1 distance between the query's two score
  distributions: a calibrated threshold on scores moves by about this much (lower is
  better).
* ``tie_rate``: share of the query's document pairs the candidate scores equal (at
  float32, as trec_eval compares): bf16 or int8 sigmoid saturation produces ties, and a
  tied reranker orders by document id, i.e. not at all (lower is better).

Conventions: a correlation over a constant score vector is undefined; it is 1.0 when both
vectors are constant (nothing to disagree on) and 0.0 when only one is. A query with
one candidate has tau, rho 1.0 and tie rate 0.0. A query with no candidates (the first
stage found nothing: empty or stopword-only texts) has no pairs to compare, and every
measure of it is undefined (NaN, null in JSON), never a perfect 1.0: a gate over values
that are all undefined is inconclusive, not passed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from evalq.core.values import PerQuery
from evalq.measure.measures import COMPUTE, Family, Measure, register_family

_FAMILIES = [
    Family("score_tau", "reranker", needs_cutoff=False, aliases=("score-tau",),
           description="Kendall tau-b of candidate vs reference reranker scores, per query"),
    Family("score_spearman", "reranker", needs_cutoff=False, aliases=("score-spearman",
                                                                      "score_rho"),
           description="Spearman rho of candidate vs reference reranker scores, per query"),
    Family("rerank_overlap", "reranker", needs_cutoff=True, aliases=("rerank-overlap",),
           description="share of the reference reranker's top k kept in the candidate's"),
    Family("abs_delta", "reranker", needs_cutoff=False, higher_is_better=False,
           aliases=("abs-delta",), description="mean |candidate - reference score| per query"),
    Family("abs_delta_p99", "reranker", needs_cutoff=False, higher_is_better=False,
           aliases=("abs-delta-p99",),
           description="99th percentile of |candidate - reference score| per query"),
    Family("score_shift", "reranker", needs_cutoff=False, higher_is_better=False,
           aliases=("score-shift",),
           description="Wasserstein-1 distance between the two score distributions"),
    Family("tie_rate", "reranker", needs_cutoff=False, higher_is_better=False,
           aliases=("tie-rate",),
           description="share of document pairs the candidate reranker scores equal"),
]
for _family in _FAMILIES:
    register_family(_family)


@dataclass(frozen=True)
class ScorePair:
    """Two rerankers' scores of the same candidate lists.

    ``reference[i, j]`` and ``candidate[i, j]`` score document ``docs[i, j]`` (an index
    into ``doc_ids``; -1 and NaN past the end of a short list) for ``query_ids[i]``.
    """

    query_ids: tuple[str, ...]
    docs: np.ndarray
    reference: np.ndarray
    candidate: np.ndarray
    doc_ids: tuple[str, ...]

    def rows(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        out = []
        for i in range(len(self.query_ids)):
            keep = self.docs[i] >= 0
            out.append((self.docs[i][keep], self.reference[i][keep], self.candidate[i][keep]))
        return out


def _correlation(fn: Callable[..., Any], ref: np.ndarray, cand: np.ndarray) -> float:
    if len(ref) < 2:
        return 1.0
    const_r, const_c = np.ptp(ref) == 0, np.ptp(cand) == 0
    if const_r or const_c:
        return 1.0 if const_r and const_c else 0.0
    return float(fn(ref, cand)[0])


def _tau(pair: ScorePair, measure: Measure) -> np.ndarray:
    from scipy.stats import kendalltau

    return np.array([_correlation(kendalltau, r, c) for _, r, c in pair.rows()])


def _spearman(pair: ScorePair, measure: Measure) -> np.ndarray:
    from scipy.stats import spearmanr

    return np.array([_correlation(spearmanr, r, c) for _, r, c in pair.rows()])


def _top(docs: np.ndarray, scores: np.ndarray, k: int, doc_ids: Sequence[str]) -> set[int]:
    """trec_eval's top k: score (as float32) descending, then document id descending."""
    s32 = scores.astype(np.float32)
    by_id = sorted(range(len(docs)), key=lambda j: doc_ids[docs[j]], reverse=True)
    order = sorted(by_id, key=lambda j: -s32[j])  # stable: equal scores keep id order
    return {int(docs[j]) for j in order[:k]}


def _overlap(pair: ScorePair, measure: Measure) -> np.ndarray:
    k = int(measure.cutoff or 10)
    values = []
    for docs, r, c in pair.rows():
        if len(docs) == 0:
            values.append(1.0)
            continue
        top_r, top_c = _top(docs, r, k, pair.doc_ids), _top(docs, c, k, pair.doc_ids)
        values.append(len(top_r & top_c) / len(top_r))
    return np.array(values)


def _abs_delta(pair: ScorePair, measure: Measure) -> np.ndarray:
    return np.array([float(np.mean(np.abs(c - r))) if len(r) else 0.0
                     for _, r, c in pair.rows()])


def _abs_delta_p99(pair: ScorePair, measure: Measure) -> np.ndarray:
    return np.array([float(np.percentile(np.abs(c - r), 99)) if len(r) else 0.0
                     for _, r, c in pair.rows()])


def _shift(pair: ScorePair, measure: Measure) -> np.ndarray:
    from scipy.stats import wasserstein_distance

    return np.array([float(wasserstein_distance(r, c)) if len(r) else 0.0
                     for _, r, c in pair.rows()])


def tie_rate(scores: np.ndarray) -> float:
    """Share of unordered pairs with equal float32 scores."""
    n = len(scores)
    if n < 2:
        return 0.0
    _, counts = np.unique(scores.astype(np.float32), return_counts=True)
    return float((counts * (counts - 1)).sum() / (n * (n - 1)))


def _ties(pair: ScorePair, measure: Measure) -> np.ndarray:
    return np.array([tie_rate(c) for _, _, c in pair.rows()])


COMPUTE.update({"score_tau": _tau, "score_spearman": _spearman, "rerank_overlap": _overlap,
                "abs_delta": _abs_delta, "abs_delta_p99": _abs_delta_p99,
                "score_shift": _shift, "tie_rate": _ties})


def evaluate_fidelity(pair: ScorePair, measures: Sequence[Measure]) -> PerQuery:
    """Per-query fidelity values keyed by ``measure.name``; NaN for a query with no
    scored pairs (nothing was measured)."""
    values = {}
    empty = np.array([len(docs) == 0 for docs, _, _ in pair.rows()], dtype=bool)
    for measure in measures:
        if measure.against != "reranker":
            raise ValueError(f"{measure.name} is not a reranker fidelity measure")
        column = np.asarray(COMPUTE[measure.family](pair, measure), dtype=np.float64)
        values[measure.name] = np.where(empty, np.nan, column) if column.size else column
    return PerQuery(pair.query_ids, values)


def pooled_drift(pair: ScorePair) -> dict[str, float]:
    """Over every pair at once: what one number per dataset says about the scores."""
    from scipy.stats import ks_2samp

    keep = pair.docs >= 0
    ref, cand = pair.reference[keep], pair.candidate[keep]
    if ref.size == 0:
        return {"pairs": 0}
    delta = cand - ref
    rows = pair.rows()
    return {
        "pairs": int(ref.size),
        "mean_delta": float(delta.mean()),
        "mean_abs_delta": float(np.abs(delta).mean()),
        "p99_abs_delta": float(np.percentile(np.abs(delta), 99)),
        "max_abs_delta": float(np.abs(delta).max()),
        "ks_statistic": float(ks_2samp(ref, cand).statistic),
        "reference_mean": float(ref.mean()), "candidate_mean": float(cand.mean()),
        "reference_std": float(ref.std()), "candidate_std": float(cand.std()),
        "tie_rate_reference": float(np.mean([tie_rate(r) for _, r, _ in rows])),
        "tie_rate_candidate": float(np.mean([tie_rate(c) for _, _, c in rows])),
    }
