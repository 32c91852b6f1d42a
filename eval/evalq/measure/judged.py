"""Measures against human judgments (qrels), equal to trec_eval / pytrec_eval.

Families (all need a cutoff ``k``; higher is better):

* ``nDCG@k`` (``ndcg_cut_k``, ``NDCG@k``): DCG with gain = relevance level and discount
  ``log2(rank + 1)``, over the ideal DCG of *all* judged-relevant documents cut at ``k``.
* ``R@k`` (``recall_k``, ``Recall@k``): relevant documents in the top ``k`` / all relevant.
* ``P@k`` (``P_k``, ``Precision@k``): relevant in the top ``k`` / ``k``, even when the run
  returned fewer than ``k`` documents (trec_eval's choice).
* ``RR@k`` (``MRR@k``, ``recip_rank@k``): 1 / rank of the first relevant document within
  ``k``, 0 if none.
* ``AP@k`` (``map_cut_k``, ``MAP@k``): sum of precision at each relevant rank within ``k``
  / all relevant (trec_eval's ``map_cut``).

trec_eval semantics, checked against pytrec_eval (pytrec-eval-terrier 0.5.11) by experiment
and by the property tests in ``tests/measure/test_metrics_judged.py``:

* a document is relevant iff its level is >= 1; its gain is the level;
* levels <= 0, negative ones included, are non-relevant with gain 0 (trec_eval gives a
  judged ``-1`` exactly the value it gives ``0``; pytrec_eval itself crashes on negative
  levels in multi-query qrels, so the tests compare those one query at a time);
* equal scores are ranked by document id descending, and "equal" is judged in float32,
  the precision trec_eval stores scores in (:func:`evalq.core.ranking.trec_score`);
* a query whose judgments hold no relevant document scores 0 on every measure (pytrec_eval
  returns 0.0 for it, not NaN, and keeps it in the average);
* a query of the qrels that the run does not contain scores 0 (pytrec_eval leaves it out of
  its output; ``trec_eval -c`` averages it as 0, which is what we do: every query in the
  qrels gets a value, so a run cannot look better by dropping hard queries);
* a query with an empty judgment set also scores 0 (pytrec_eval omits it);
* queries of the run that the qrels do not judge are ignored.

Two entry points, both vectorized over all queries at once (numpy, no Python loop per
query in the arithmetic):

* :func:`evaluate` takes a :class:`~evalq.core.ranking.Ranking` (what ``evalq run``'s search
  produces) and a :class:`JudgedIndex` built once per dataset against the corpus' doc ids,
  so many variants are scored against the same qrels cheaply;
* :func:`evaluate_dict` takes the ``{qid: {docid: score}}`` dicts that pytrec_eval and ranx
  take. It never sorts whole runs: it looks up each *relevant* judged document in the run and
  computes its trec_eval rank as 1 + (documents scoring higher) + (equal scores with a
  larger document id).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain, compress, repeat
from operator import methodcaller

import numpy as np

from evalq.core.dataset import Qrels
from evalq.core.errors import InputError
from evalq.core.ranking import Ranking, trec_score
from evalq.core.values import PerQuery
from evalq.measure.measures import COMPUTE, Family, Measure, register_family, register_pattern_alias

_VALUES = methodcaller("values")  # C-level ``m.values()`` for map()

_FAMILIES = (
    Family("nDCG", "qrels", needs_cutoff=True, aliases=("NDCG", "ndcg_cut"),
           description="normalized discounted cumulative gain (gain = relevance level)"),
    Family("R", "qrels", needs_cutoff=True, aliases=("Recall",),
           description="share of the relevant documents retrieved in the top k"),
    Family("P", "qrels", needs_cutoff=True, aliases=("Precision",),
           description="share of the top k that is relevant (divides by k)"),
    Family("RR", "qrels", needs_cutoff=True, aliases=("MRR", "recip_rank"),
           description="reciprocal rank of the first relevant document within k"),
    Family("AP", "qrels", needs_cutoff=True, aliases=("MAP", "map_cut"),
           description="average precision cut at k (trec_eval map_cut)"),
)
for _family in _FAMILIES:
    register_family(_family)
# trec_eval / pytrec_eval spellings: ndcg_cut_10, ndcg_cut.10, recall_100, P_10, map_cut_100.
register_pattern_alias(r"ndcg_cut[._](\d+)", "nDCG")
register_pattern_alias(r"recall[._](\d+)", "R")
register_pattern_alias(r"P[._](\d+)", "P")
register_pattern_alias(r"map_cut[._](\d+)", "AP")
register_pattern_alias(r"recip_rank[._](\d+)", "RR")


# ---------------------------------------------------------------------- judged index


@dataclass(frozen=True)
class _FlatQrels:
    """Qrels flattened to the relevant judgments only (level >= 1): what every measure
    needs. Non-relevant judgments change no measure here, so they are dropped early."""

    query_ids: tuple[str, ...]
    query_pos: np.ndarray  # (n_rel,) int64 position of the judgment's query
    docs: list[str]  # (n_rel,) document ids
    gains: np.ndarray  # (n_rel,) float64 relevance levels (>= 1)
    num_rel: np.ndarray  # (Q,) int64
    ideal: np.ndarray  # (Q, max num_rel) float64 gains sorted descending, 0-padded

    @classmethod
    def of(cls, qrels: Qrels | Mapping[str, Mapping[str, int]]) -> _FlatQrels:
        judgments = qrels.judgments if isinstance(qrels, Qrels) else qrels
        query_ids = tuple(judgments)
        per_query = [judgments[q] for q in query_ids]
        lengths = np.fromiter(map(len, per_query), dtype=np.int64, count=len(per_query))
        total = int(lengths.sum())
        levels = np.fromiter(
            chain.from_iterable(map(_VALUES, per_query)), dtype=np.float64, count=total
        )
        relevant = levels >= 1
        rows = np.repeat(np.arange(len(query_ids), dtype=np.int64), lengths)[relevant]
        docs = list(compress(chain.from_iterable(per_query), relevant.tolist()))
        gains = levels[relevant]
        num_rel = np.bincount(rows, minlength=len(query_ids)).astype(np.int64)
        # Ideal ranking: each query's gains sorted descending, as one flat lexsort.
        order = np.lexsort((-gains, rows))
        starts = np.zeros(len(query_ids), dtype=np.int64)
        np.cumsum(num_rel[:-1], out=starts[1:])
        cols = np.arange(len(rows), dtype=np.int64) - np.repeat(starts, num_rel)
        ideal = np.zeros((len(query_ids), int(num_rel.max()) if len(rows) else 0))
        ideal[rows[order], cols] = gains[order]
        return cls(query_ids, rows, docs, gains, num_rel, ideal)


@dataclass(frozen=True)
class JudgedIndex:
    """Qrels as arrays aligned with a document vocabulary, built once per dataset.

    ``keys`` are ``query_position * len(doc_ids) + doc_index`` of every relevant judgment
    whose document is in ``doc_ids``, sorted, so a whole ranking matrix is looked up with
    one ``np.searchsorted``. ``relevant_doc[i]`` says whether document ``i`` is relevant to
    any query (its last slot, hit by the empty index ``-1``, is False): one gather with it
    skips the binary search for most of a ranking. Relevant documents outside ``doc_ids``
    still count in ``num_rel`` and the ideal DCG (trec_eval counts every judged-relevant
    document), they just can never be retrieved.
    """

    query_ids: tuple[str, ...]
    doc_ids: tuple[str, ...]
    keys: np.ndarray
    key_gains: np.ndarray
    num_rel: np.ndarray
    ideal: np.ndarray
    relevant_doc: np.ndarray = field(repr=False)
    query_pos: Mapping[str, int] = field(repr=False)

    @classmethod
    def build(
        cls, qrels: Qrels | Mapping[str, Mapping[str, int]], doc_ids: Sequence[str]
    ) -> JudgedIndex:
        flat = _FlatQrels.of(qrels)
        doc_ids = tuple(doc_ids)
        lookup = dict(zip(doc_ids, range(len(doc_ids)), strict=True))
        doc_index = np.fromiter(
            map(lookup.get, flat.docs, repeat(-1)), dtype=np.int64, count=len(flat.docs)
        )
        known = doc_index >= 0
        keys = flat.query_pos[known] * max(len(doc_ids), 1) + doc_index[known]
        order = np.argsort(keys, kind="stable")
        relevant_doc = np.zeros(len(doc_ids) + 1, dtype=bool)
        relevant_doc[doc_index[known]] = True
        return cls(
            query_ids=flat.query_ids,
            doc_ids=doc_ids,
            keys=keys[order],
            key_gains=flat.gains[known][order],
            num_rel=flat.num_rel,
            ideal=flat.ideal,
            relevant_doc=relevant_doc,
            query_pos=dict(zip(flat.query_ids, range(len(flat.query_ids)), strict=True)),
        )


# ---------------------------------------------------------------------- the computation


@dataclass(frozen=True)
class GainMatrix:
    """What every qrels measure is computed from: ``gains[i, r]`` is the gain of the
    document at rank ``r + 1`` for query ``i`` (0: non-relevant, unjudged or empty slot),
    for the first ``gains.shape[1]`` ranks (the largest cutoff asked for)."""

    gains: np.ndarray  # (Q, depth) float64
    num_rel: np.ndarray  # (Q,) int64
    ideal: np.ndarray  # (Q, M) float64, sorted descending

    @cached_property
    def relevant(self) -> np.ndarray:
        return self.gains >= 1

    @cached_property
    def hits_cumsum(self) -> np.ndarray:
        return np.cumsum(self.relevant, axis=1, dtype=np.float64)

    def hits_at(self, k: int) -> np.ndarray:
        k = min(k, self.gains.shape[1])
        if k == 0:
            return np.zeros(self.gains.shape[0])
        return self.hits_cumsum[:, k - 1]

    def per_relevant(self, numerator: np.ndarray) -> np.ndarray:
        out = np.zeros(len(self.num_rel))
        has = self.num_rel > 0
        out[has] = numerator[has] / self.num_rel[has]
        return out


def _discounts(k: int) -> np.ndarray:
    return 1.0 / np.log2(np.arange(2, k + 2, dtype=np.float64))


def _ndcg(ctx: GainMatrix, measure: Measure) -> np.ndarray:
    k = int(measure.cutoff or 0)
    top = ctx.gains[:, :k]
    dcg = top @ _discounts(top.shape[1])
    best = ctx.ideal[:, :k]
    idcg = best @ _discounts(best.shape[1])
    out = np.zeros(len(dcg))
    has = idcg > 0
    out[has] = dcg[has] / idcg[has]
    return out


def _precision(ctx: GainMatrix, measure: Measure) -> np.ndarray:
    k = int(measure.cutoff or 0)
    return ctx.hits_at(k) / k


def _recall(ctx: GainMatrix, measure: Measure) -> np.ndarray:
    return ctx.per_relevant(ctx.hits_at(int(measure.cutoff or 0)))


def _reciprocal_rank(ctx: GainMatrix, measure: Measure) -> np.ndarray:
    top = ctx.relevant[:, : int(measure.cutoff or 0)]
    out = np.zeros(top.shape[0])
    if top.shape[1] == 0:
        return out
    first = top.argmax(axis=1)
    found = top[np.arange(top.shape[0]), first]
    out[found] = 1.0 / (first[found] + 1)
    return out


def _average_precision(ctx: GainMatrix, measure: Measure) -> np.ndarray:
    k = min(int(measure.cutoff or 0), ctx.gains.shape[1])
    if k == 0:
        return np.zeros(ctx.gains.shape[0])
    precision = ctx.hits_cumsum[:, :k] / np.arange(1, k + 1, dtype=np.float64)
    summed = np.einsum("ij,ij->i", precision, ctx.relevant[:, :k])
    return ctx.per_relevant(summed)


COMPUTE.update(
    {"nDCG": _ndcg, "P": _precision, "R": _recall, "RR": _reciprocal_rank,
     "AP": _average_precision}
)


def _check_measures(measures: Sequence[Measure]) -> int:
    """Return the deepest cutoff; reject measures that are not against qrels."""
    deepest = 0
    for m in measures:
        if m.against != "qrels":
            raise InputError(
                f"measure {m.name} is computed against the reference run, not qrels",
                field="metric",
                fix="list it under the reference metrics of the recipe",
            )
        deepest = max(deepest, int(m.cutoff or 0))
    return deepest


def _finish(query_ids: tuple[str, ...], ctx: GainMatrix,
            measures: Sequence[Measure]) -> PerQuery:
    return PerQuery(
        query_ids=query_ids,
        values={m.name: COMPUTE[m.family](ctx, m) for m in measures},
    )


def evaluate(
    ranking: Ranking, qrels: Qrels | JudgedIndex, measures: Sequence[Measure]
) -> PerQuery:
    """Per-query values of qrels ``measures`` for ``ranking``, in the qrels' query order.

    Pass a :class:`JudgedIndex` built against ``ranking.doc_ids`` to score many rankings
    against the same qrels without re-reading them; plain :class:`Qrels` build one here.
    Inputs are not modified.
    """
    deepest = _check_measures(measures)
    index = qrels if isinstance(qrels, JudgedIndex) else JudgedIndex.build(qrels,
                                                                            ranking.doc_ids)
    if index.doc_ids is not ranking.doc_ids and index.doc_ids != ranking.doc_ids:
        raise ValueError("the JudgedIndex was built for another document vocabulary than "
                         "the ranking's doc_ids")
    n_queries = len(index.query_ids)
    depth = min(deepest, ranking.depth)
    rows = np.fromiter(map(index.query_pos.get, ranking.query_ids, repeat(-1)),
                       dtype=np.int64, count=len(ranking.query_ids))
    judged = rows >= 0
    gains = np.zeros((n_queries, depth))
    if judged.any() and depth and len(index.keys):
        if judged.all():
            top, top_rows = ranking.indices[:, :depth], rows
        else:
            top, top_rows = ranking.indices[judged, :depth], rows[judged]
        # Only slots holding a document relevant to some query need the binary search.
        r, c = np.nonzero(index.relevant_doc[top])
        keys = top_rows[r] * max(len(index.doc_ids), 1) + top[r, c]
        at = np.searchsorted(index.keys, keys)
        np.minimum(at, len(index.keys) - 1, out=at)
        hit = index.keys[at] == keys
        gains[top_rows[r[hit]], c[hit]] = index.key_gains[at[hit]]
    ctx = GainMatrix(gains=gains, num_rel=index.num_rel, ideal=index.ideal)
    return _finish(index.query_ids, ctx, measures)


_EMPTY: Mapping[str, float] = {}
# Compare tied hits against at most this many score cells at once (memory bound).
_CHUNK_CELLS = 1 << 22


def evaluate_dict(
    run: Mapping[str, Mapping[str, float]],
    qrels: Qrels | Mapping[str, Mapping[str, int]],
    measures: Sequence[Measure],
) -> PerQuery:
    """Per-query values from the dicts pytrec_eval and ranx take, in the qrels' order.

    Only relevant judged documents are looked up in the run; each one's trec_eval rank is
    1 + (documents of its query scoring higher) + (documents with an equal score and a
    larger id). Those counts come from one padded score matrix; the document strings are
    compared only for the (rare) hits that share their score with another document.
    """
    deepest = _check_measures(measures)
    flat = _FlatQrels.of(qrels)
    n_queries = len(flat.query_ids)
    runs = [r if type(r) is dict else dict(r)
            for r in map(run.get, flat.query_ids, repeat(_EMPTY))]
    lengths = np.fromiter(map(len, runs), dtype=np.int64, count=n_queries)
    total = int(lengths.sum())
    longest = int(lengths.max()) if total else 0
    gains = np.zeros((n_queries, deepest))
    ctx = GainMatrix(gains=gains, num_rel=flat.num_rel, ideal=flat.ideal)
    if not total or not len(flat.docs):
        return _finish(flat.query_ids, ctx, measures)
    if n_queries * longest > 4 * total + (1 << 20):
        # Very uneven run lengths: a padded matrix would be mostly padding. Sort instead.
        ranking = Ranking.from_dict(dict(zip(flat.query_ids, runs, strict=True)),
                                    depth=deepest)
        return evaluate(ranking, JudgedIndex.build(qrels, ranking.doc_ids), measures)

    scores = np.fromiter(chain.from_iterable(map(_VALUES, runs)), dtype=np.float64,
                         count=total)
    if np.isnan(scores).any():
        raise InputError("a run score is NaN", field="score",
                         fix="give every retrieved document a numeric score")
    starts = np.zeros(n_queries, dtype=np.int64)
    np.cumsum(lengths[:-1], out=starts[1:])
    run_rows = np.repeat(np.arange(n_queries, dtype=np.int64), lengths)
    cols = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
    # Scores as trec_eval compares them (float32); nan pads are never >, never ==.
    matrix = np.full((n_queries, longest), np.nan, dtype=np.float32)
    matrix[run_rows, cols] = trec_score(scores)

    # Score of each relevant judgment in its query's run (nan: not retrieved).
    entry_runs = list(chain.from_iterable(map(repeat, runs, flat.num_rel.tolist())))
    hit_scores = np.fromiter(map(dict.get, entry_runs, flat.docs, repeat(math.nan)),
                             dtype=np.float64, count=len(flat.docs))
    found = np.flatnonzero(~np.isnan(hit_scores))
    h_rows, h_scores = flat.query_pos[found], trec_score(hit_scores[found])
    above = np.empty(len(found), dtype=np.int64)
    level = np.empty(len(found), dtype=np.int64)
    step = max(1, _CHUNK_CELLS // max(longest, 1))
    for lo in range(0, len(found), step):  # chunks of hits, not a loop per query
        block = matrix[h_rows[lo:lo + step]]
        s = h_scores[lo:lo + step, None]
        above[lo:lo + step] = np.count_nonzero(block > s, axis=1)
        level[lo:lo + step] = np.count_nonzero(block == s, axis=1)
    tied = np.flatnonzero(level > 1)
    if len(tied):
        above[tied] += _larger_ids_among_equal(
            matrix, starts, runs, h_rows[tied], h_scores[tied],
            [flat.docs[i] for i in found[tied].tolist()],
        )
    inside = above < deepest
    gains[h_rows[inside], above[inside]] = flat.gains[found[inside]]
    return _finish(flat.query_ids, ctx, measures)


def _larger_ids_among_equal(
    matrix: np.ndarray,
    starts: np.ndarray,
    runs: list[dict[str, float]],
    rows: np.ndarray,
    scores: np.ndarray,
    docs: list[str],
) -> np.ndarray:
    """For each tied hit, how many documents of its query share its score and have a
    larger id (trec_eval ranks them first)."""
    which, cols = np.nonzero(matrix[rows] == scores[:, None])
    flat_docs = list(chain.from_iterable(runs))
    competitors = [flat_docs[p] for p in (starts[rows[which]] + cols).tolist()]
    mine = [docs[i] for i in which.tolist()]
    larger = np.fromiter(map(operator.gt, competitors, mine), dtype=bool, count=len(mine))
    return np.bincount(which, weights=larger, minlength=len(rows)).astype(np.int64)
