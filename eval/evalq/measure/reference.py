"""Measures against the reference run: the full-precision variant's ranking and vectors
are the ground truth, and each measure says how much of it a candidate keeps.

Why these measures exist beside qrels metrics: qrels judge a handful of documents per
query, so two runs can reach the same nDCG@10 while ranking quite different documents.
Agreement with the reference ranking sees every retrieved document, judged or not, and
is what "the quantized model behaves like the original" means in production.

Ranking measures (all per query, aligned to the reference's query ids, higher is better,
1.0 for identical top-k lists):

* ``overlap@k``: |top-k(candidate) ∩ top-k(reference)| / |top-k(reference)|. The
  denominator is k whenever the reference returned at least k documents (always, unless
  the corpus is smaller than k), so identical rankings score 1.0 even on a tiny corpus.
* ``refnDCG@k`` (alias ``ref-nDCG``): nDCG@k of the candidate with the reference ranking
  as graded pseudo-judgments. The pseudo-judgment depth is the cutoff k: the document
  at reference rank r <= k has gain k − r + 1 (the reference's first document k, its
  k-th document 1, everything else 0). Linear gains and the log2(rank + 1) discount of
  trec_eval's ndcg; the ideal ranking is the reference itself, so the value is 1.0 iff
  the candidate's top-k equals the reference's.
* ``RBO(p=0.9)@k``: rank-biased overlap, the extrapolated form RBO_ext of Webber,
  Moffat and Zobel (2010, eq. 32, lists of equal depth):
  ``RBO_ext = X_l/l · p^l + (1−p)/p · Σ_{d=1..l} X_d/d · p^d``, with X_d the number of
  documents shared by the two depth-d prefixes and l the evaluation depth. l is the
  length of the longer of the two top-k lists (k unless the run or corpus is shorter);
  slots past the end of a shorter list count as non-matching, which is slightly more
  conservative than Webber's uneven-length extrapolation. ``p`` must lie in (0, 1):
  smaller p weighs the top ranks more (p=0.9 puts ~86% of the weight on the top 10).
* ``tau@k`` (alias ``kendall``): Kendall's tau-b between the two rankings of the union of
  the two top-k lists. A document missing from one list takes rank k + 1 in that list,
  so all missing documents tie there; tau-b corrects for those ties (the same statistic
  as ``scipy.stats.kendalltau``'s default).

Edge conventions, the same for the four measures: a query missing from the candidate run
(or with an empty candidate list) scores as an empty list: 0.0 for overlap, refnDCG and
RBO (tau: 0.0, no usable order). A query whose reference top-k is empty (only on an empty
corpus) has nothing to agree with: 1.0 if the candidate's is empty too, else 0.0. A
tau whose tie-corrected denominator is zero (e.g. k=1) is 1.0 for identical lists, else 0.0.

Vectors: :func:`vector_agreement` gives the cosine between reference and candidate
embeddings of the same texts (float64), with NaN/Inf counts and a summary (mean, 1st
percentile, min) that is NaN and flagged ``ok=False`` when any cosine is undefined, so a
broken encoder cannot pass unnoticed. The ``cosine`` family makes the per-query cosines
gateable like any measure; documents are not queries, so their cosines are summarized
(``VectorAgreement.summary()``), not paired.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from evalq.core.errors import InputError
from evalq.core.ranking import Ranking
from evalq.core.values import PerQuery
from evalq.measure.measures import COMPUTE, FAMILIES, Family, Measure, register_family

OVERLAP = register_family(
    Family(
        name="overlap",
        against="reference",
        needs_cutoff=True,
        description="share of the reference top-k that the candidate also returns in its top-k",
    )
)
REF_NDCG = register_family(
    Family(
        name="refnDCG",
        against="reference",
        needs_cutoff=True,
        description="nDCG@k with the reference ranking as graded pseudo-judgments "
        "(reference rank r <= k has gain k - r + 1)",
        aliases=("ref-nDCG", "ref_nDCG"),
    )
)
RBO = register_family(
    Family(
        name="RBO",
        against="reference",
        needs_cutoff=True,
        defaults=(("p", 0.9),),
        description="rank-biased overlap with the reference top-k (extrapolated RBO_ext)",
        aliases=("rank-biased-overlap",),
    )
)
TAU = register_family(
    Family(
        name="tau",
        against="reference",
        needs_cutoff=True,
        description="Kendall's tau-b over the union of the candidate and reference top-k",
        aliases=("kendall", "kendall-tau", "kendalltau"),
    )
)
COSINE = register_family(
    Family(
        name="cosine",
        against="reference",
        needs_cutoff=False,
        description="cosine between reference and candidate embeddings of each query",
        aliases=("cos",),
    )
)


# --------------------------------------------------------------------------- vectors


@dataclass(frozen=True)
class CosineSummary:
    """Summary of per-text cosines. ``ok`` is False when any cosine is undefined (NaN:
    a non-finite or all-zero vector) or there are no texts; then mean/p1/min are NaN."""

    n: int
    mean: float
    p1: float  # 1st percentile, numpy's linear interpolation
    min: float
    undefined: int  # texts whose cosine is NaN
    candidate_nan: int  # candidate vectors holding at least one NaN
    candidate_inf: int  # candidate vectors holding at least one ±Inf
    reference_nonfinite: int  # reference vectors holding NaN or Inf
    ok: bool


@dataclass(frozen=True)
class VectorAgreement:
    """Cosine(reference_i, candidate_i) per text ``ids[i]``, float64."""

    ids: tuple[str, ...]
    cosine: np.ndarray
    candidate_nan: int
    candidate_inf: int
    reference_nonfinite: int

    def summary(self) -> CosineSummary:
        undefined = int(np.count_nonzero(np.isnan(self.cosine)))
        ok = undefined == 0 and self.cosine.size > 0
        if ok:
            mean = float(self.cosine.mean())
            p1 = float(np.percentile(self.cosine, 1.0))
            low = float(self.cosine.min())
        else:
            mean = p1 = low = math.nan
        return CosineSummary(
            n=int(self.cosine.size),
            mean=mean,
            p1=p1,
            min=low,
            undefined=undefined,
            candidate_nan=self.candidate_nan,
            candidate_inf=self.candidate_inf,
            reference_nonfinite=self.reference_nonfinite,
            ok=ok,
        )


def vector_agreement(
    reference: np.ndarray, candidate: np.ndarray, ids: Sequence[str]
) -> VectorAgreement:
    """Per-text cosine between two embedding matrices of the same texts, in float64.

    Rows must correspond (row i of both embeds ``ids[i]``) and have the same dimension:
    pass dequantized float vectors for vector-quantized candidates. A row with NaN or
    Inf, or an all-zero row, has an undefined cosine: it is NaN here and counted, never
    dropped. Values are clipped to [-1, 1] (float64 rounding can exceed 1 by 1 ulp).
    """
    ref = np.asarray(reference)
    cand = np.asarray(candidate)
    ids = tuple(ids)
    if ref.ndim != 2 or cand.shape != ref.shape or ref.shape[0] != len(ids):
        raise InputError(
            message=f"cannot compare embeddings: reference shape {ref.shape}, candidate shape "
            f"{cand.shape}, {len(ids)} ids",
            field="vectors",
            fix="reference and candidate must embed the same texts, in the same order, with "
            "the same dimension (dequantize vector-quantized candidates first)",
        )
    ref64 = ref.astype(np.float64, copy=False)
    cand64 = cand.astype(np.float64, copy=False)
    cand_nan = int(np.count_nonzero(np.isnan(cand64).any(axis=1)))
    cand_inf = int(np.count_nonzero(np.isinf(cand64).any(axis=1)))
    ref_bad = int(np.count_nonzero(~np.isfinite(ref64).all(axis=1)))
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        dots = np.einsum("ij,ij->i", ref64, cand64)
        norms = np.linalg.norm(ref64, axis=1) * np.linalg.norm(cand64, axis=1)
        cosine = dots / norms
    finite_rows = np.isfinite(ref64).all(axis=1) & np.isfinite(cand64).all(axis=1)
    cosine = np.where(finite_rows & (norms > 0), np.clip(cosine, -1.0, 1.0), np.nan)
    return VectorAgreement(ids, cosine, cand_nan, cand_inf, ref_bad)


# --------------------------------------------------------------------------- rankings


@dataclass(frozen=True)
class RankingPair:
    """Candidate and reference top-k lists aligned row by row to the reference's queries,
    as document indices in one shared id space (-1 = empty slot, empties last)."""

    query_ids: tuple[str, ...]
    candidate: np.ndarray  # (Q, k) int64
    reference: np.ndarray  # (Q, k) int64
    n_ids: int  # document indices are < n_ids
    query_cosine: np.ndarray | None  # (Q,) float64 when vectors were given

    @property
    def k(self) -> int:
        return int(self.reference.shape[1])

    def top(self, k: int) -> RankingPair:
        return RankingPair(
            self.query_ids,
            self.candidate[:, :k],
            self.reference[:, :k],
            self.n_ids,
            self.query_cosine,
        )


def _top_k(indices: np.ndarray, k: int) -> np.ndarray:
    rows, depth = indices.shape
    if depth >= k:
        return np.ascontiguousarray(indices[:, :k], dtype=np.int64)
    out = np.full((rows, k), -1, dtype=np.int64)
    out[:, :depth] = indices
    return out


def align(candidate: Ranking, reference: Ranking, k: int) -> RankingPair:
    """Top-k of both rankings aligned to the reference's query order and document ids.

    Candidate queries missing from the reference are ignored; reference queries missing
    from the candidate get an empty candidate list. When the two rankings index different
    ``doc_ids`` tuples, candidate indices are mapped onto the reference's (documents the
    reference never had get fresh indices, so they never match).
    """
    ref = _top_k(reference.indices, k)
    n_ids = len(reference.doc_ids)
    cand_all = candidate.indices
    if candidate.doc_ids is not reference.doc_ids and candidate.doc_ids != reference.doc_ids:
        position = {doc: i for i, doc in enumerate(reference.doc_ids)}
        mapping = np.empty(len(candidate.doc_ids) + 1, dtype=np.int64)
        for j, doc in enumerate(candidate.doc_ids):
            mapping[j] = position.get(doc, n_ids + j)
        mapping[-1] = -1  # index -1 (empty slot) stays empty
        n_ids += len(candidate.doc_ids)
        cand_all = mapping[cand_all]
    if candidate.query_ids == reference.query_ids:
        cand = _top_k(cand_all, k)
    else:
        row_of = {q: i for i, q in enumerate(candidate.query_ids)}
        rows = np.array([row_of.get(q, -1) for q in reference.query_ids], dtype=np.int64)
        cand = np.full((len(reference.query_ids), k), -1, dtype=np.int64)
        present = rows >= 0
        cand[present] = _top_k(cand_all[rows[present]], k)
    return RankingPair(tuple(reference.query_ids), cand, ref, n_ids, None)


def positions_in(items: np.ndarray, lists: np.ndarray, n_ids: int) -> np.ndarray:
    """For each entry of ``items`` (Q, a), its 0-based position in the same row of
    ``lists`` (Q, b), or -1 when absent or empty. One global sort, no Python loop."""
    q, b = lists.shape
    if lists.size == 0 or items.size == 0:
        return np.full(items.shape, -1, dtype=np.int64)
    span = np.int64(n_ids + 1)  # n_ids is the sentinel for empty slots
    row = np.arange(q, dtype=np.int64)[:, None] * span
    keys = (row + np.where(lists >= 0, lists, n_ids)).ravel()
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    probe = (row + np.where(items >= 0, items, n_ids)).ravel()
    at = np.minimum(np.searchsorted(ordered, probe), ordered.size - 1)
    hit = (ordered[at] == probe) & (items.ravel() >= 0)
    found = np.where(hit, order[at] % b, -1)
    return found.reshape(items.shape)


def _empty_reference_rule(pair: RankingPair, values: np.ndarray) -> np.ndarray:
    """Queries whose reference list is empty: 1.0 if the candidate's is empty too, else 0."""
    ref_empty = pair.reference[:, 0] < 0
    if ref_empty.any():
        cand_empty = pair.candidate[:, 0] < 0
        values = np.where(ref_empty, np.where(cand_empty, 1.0, 0.0), values)
    return values


def _overlap(pair: RankingPair, measure: Measure) -> np.ndarray:
    p = pair.top(_cutoff(measure))
    shared = np.count_nonzero(positions_in(p.candidate, p.reference, p.n_ids) >= 0, axis=1)
    n_ref = np.count_nonzero(p.reference >= 0, axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        values = shared / n_ref
    return _empty_reference_rule(p, values.astype(np.float64))


def _ref_ndcg(pair: RankingPair, measure: Measure) -> np.ndarray:
    k = _cutoff(measure)
    p = pair.top(k)
    ref_rank = positions_in(p.candidate, p.reference, p.n_ids)  # 0-based, -1 absent
    discount = 1.0 / np.log2(np.arange(2, k + 2, dtype=np.float64))
    gains = np.where(ref_rank >= 0, k - ref_rank, 0).astype(np.float64)
    dcg = gains @ discount
    ideal_gains = np.where(p.reference >= 0, k - np.arange(k), 0).astype(np.float64)
    idcg = ideal_gains @ discount
    with np.errstate(invalid="ignore", divide="ignore"):
        values = dcg / idcg
    return _empty_reference_rule(p, values)


def _rbo(pair: RankingPair, measure: Measure) -> np.ndarray:
    k = _cutoff(measure)
    rbo_p = measure.param("p")
    if not 0.0 < rbo_p < 1.0:
        raise InputError(
            message=f"{measure.name}: the RBO persistence p must lie strictly between 0 and 1",
            field="metric",
            fix="write e.g. RBO(p=0.9)@100",
        )
    p = pair.top(k)
    q = p.reference.shape[0]
    ref_pos = positions_in(p.candidate, p.reference, p.n_ids)
    cand_pos = np.arange(k, dtype=np.int64)[None, :]
    matched = ref_pos >= 0
    # A shared document enters X_d from depth max(i, j) + 1 on.
    enter = np.maximum(ref_pos, cand_pos)
    rows = np.broadcast_to(np.arange(q)[:, None], (q, k))
    counts = np.bincount((rows[matched] * k + enter[matched]).ravel(), minlength=q * k).reshape(
        q, k
    )
    overlap_at = np.cumsum(counts, axis=1).astype(np.float64)  # X_d, d = 1..k
    depth_d = np.arange(1, k + 1, dtype=np.float64)
    length = np.maximum(
        np.count_nonzero(p.candidate >= 0, axis=1), np.count_nonzero(p.reference >= 0, axis=1)
    )
    weights = rbo_p**depth_d
    within = depth_d[None, :] <= length[:, None]
    series = np.where(within, overlap_at / depth_d * weights, 0.0).sum(axis=1)
    last = np.maximum(length, 1) - 1
    tail = overlap_at[np.arange(q), last] / np.maximum(length, 1) * rbo_p ** np.maximum(length, 1)
    values = tail + (1.0 - rbo_p) / rbo_p * series
    values = np.where(length == 0, 1.0, values)
    return _empty_reference_rule(p, values)


# Inversion counting works on (chunk, k(k-1)/2) blocks; bound the elements of one block.
_TAU_BLOCK_ELEMENTS = 4_000_000


def _tau(pair: RankingPair, measure: Measure) -> np.ndarray:
    """Kendall's tau-b over the union, from the structure of the two lists.

    The union splits into S (in both lists: distinct ranks in both), C (candidate only:
    rank k+1 in the reference) and B (reference only: rank k+1 in the candidate). Pairs
    then fall into known cases, so only S×S needs pairwise work:

    * S×S: concordant unless inverted; score |S|(|S|−1)/2 − 2·inversions;
    * S×C: the S document is better in the reference, so the pair is concordant iff it
      also comes first in the candidate; summed by prefix counts along the candidate;
    * S×B: likewise along the reference;
    * C×B: always discordant (each is better in its own list): −|C|·|B|;
    * C×C: tied in the reference; B×B: tied in the candidate (the tau-b corrections).

    Equal to the all-pairs definition (and scipy's ``kendalltau``) at a quarter of the
    pairwise work; the tests check both.
    """
    k = _cutoff(measure)
    p = pair.top(k)
    q = p.reference.shape[0]
    ref_of_cand = positions_in(p.candidate, p.reference, p.n_ids)  # -1: not in reference
    cand_of_ref = positions_in(p.reference, p.candidate, p.n_ids)
    shared_c = ref_of_cand >= 0  # along the candidate list
    shared_r = cand_of_ref >= 0  # along the reference list
    only_c = (p.candidate >= 0) & ~shared_c
    only_r = (p.reference >= 0) & ~shared_r
    n_s = np.count_nonzero(shared_c, axis=1).astype(np.int64)
    n_c = np.count_nonzero(only_c, axis=1).astype(np.int64)
    n_b = np.count_nonzero(only_r, axis=1).astype(np.int64)

    # S×C and S×B: for each one-sided document, shared documents before minus after it.
    before_c = np.cumsum(shared_c, axis=1)
    score_sc = np.where(only_c, 2 * before_c - n_s[:, None], 0).sum(axis=1)
    before_r = np.cumsum(shared_r, axis=1)
    score_sb = np.where(only_r, 2 * before_r - n_s[:, None], 0).sum(axis=1)

    # S×S: inversions of the reference positions read in candidate order.
    first, second = np.triu_indices(k, k=1)
    inversions = np.zeros(q, dtype=np.int64)
    position_type = np.int16 if k < 32_000 else np.int32
    ranks = ref_of_cand.astype(position_type)
    block = max(1, _TAU_BLOCK_ELEMENTS // max(first.size, 1))
    for start in range(0, q, block):
        sl = slice(start, min(q, start + block))
        later = ranks[sl][:, second]
        inversions[sl] = np.count_nonzero((ranks[sl][:, first] > later) & (later >= 0), axis=1)

    score = n_s * (n_s - 1) // 2 - 2 * inversions + score_sc + score_sb - n_c * n_b
    union = n_s + n_c + n_b
    pairs = union * (union - 1) // 2
    untied_c = pairs - n_b * (n_b - 1) // 2
    untied_r = pairs - n_c * (n_c - 1) // 2
    denominator = np.sqrt(untied_c.astype(np.float64) * untied_r)
    with np.errstate(invalid="ignore", divide="ignore"):
        values = np.where(denominator > 0, score / denominator, np.nan)
    identical = np.all(p.candidate == p.reference, axis=1)
    values = np.where(np.isnan(values), np.where(identical, 1.0, 0.0), values)
    return _empty_reference_rule(p, values)


def _cosine(pair: RankingPair, measure: Measure) -> np.ndarray:
    if pair.query_cosine is None:
        raise ValueError("the cosine measure needs query vectors: pass query_agreement")
    return pair.query_cosine


def _cutoff(measure: Measure) -> int:
    assert measure.cutoff is not None  # parse_measure enforces it for these families
    return measure.cutoff


# Same calling convention as ``judged``: COMPUTE[family](context, measure).
ReferenceCompute = Callable[[RankingPair, Measure], np.ndarray]

COMPUTE.update(
    {
        "overlap": _overlap,
        "refnDCG": _ref_ndcg,
        "RBO": _rbo,
        "tau": _tau,
        "cosine": _cosine,
    }
)


def _query_cosines(agreement: VectorAgreement, query_ids: Sequence[str]) -> np.ndarray:
    if agreement.ids == tuple(query_ids):
        return agreement.cosine
    row_of = {q: i for i, q in enumerate(agreement.ids)}
    missing = [q for q in query_ids if q not in row_of]
    if missing:
        raise ValueError(
            f"query vectors lack {len(missing)} reference queries (first: {missing[0]!r})"
        )
    return agreement.cosine[np.array([row_of[q] for q in query_ids], dtype=np.int64)]


def evaluate_reference(
    candidate: Ranking,
    reference: Ranking,
    measures: Sequence[Measure],
    *,
    query_agreement: VectorAgreement | None = None,
) -> PerQuery:
    """Per-query reference measures of ``candidate`` against ``reference``.

    Values are aligned to ``reference.query_ids``, keyed by ``measure.name``. Only
    measures of families registered here are accepted; ``cosine`` needs
    ``query_agreement`` (from :func:`vector_agreement` over the query embeddings).
    Inputs are not modified.
    """
    for measure in measures:
        if measure.family not in _REFERENCE_FAMILIES:
            raise ValueError(
                f"{measure.name} is measured against {FAMILIES[measure.family].against}, "
                "not against the reference run"
            )
    cutoffs = [m.cutoff for m in measures if m.cutoff is not None]
    k = max(cutoffs, default=1)
    pair = align(candidate, reference, k)
    if query_agreement is not None:
        pair = RankingPair(
            pair.query_ids,
            pair.candidate,
            pair.reference,
            pair.n_ids,
            _query_cosines(query_agreement, pair.query_ids),
        )
    values: dict[str, np.ndarray] = {}
    for measure in measures:
        compute: ReferenceCompute = COMPUTE[measure.family]
        values[measure.name] = np.asarray(compute(pair, measure), dtype=np.float64)
    return PerQuery(pair.query_ids, values)


_REFERENCE_FAMILIES: Mapping[str, Family] = {
    f.name: f for f in (OVERLAP, REF_NDCG, RBO, TAU, COSINE)
}
