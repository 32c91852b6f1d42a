"""A ranking (a "run" in TREC terms) as dense arrays.

Row ``i`` holds the ranked documents of ``query_ids[i]`` as indices into ``doc_ids``,
best first, in trec_eval's order: score descending, then document id descending for
equal scores. Empty slots (fewer than ``depth`` results) hold index ``-1`` and score
``nan``. Arrays make metrics vectorizable over all queries at once; dict conversions exist for
interoperability with peers, and TREC run files are read and written by
:mod:`evalq.data.trec` (a value type does no file I/O).

Why trec_eval's order matters: trec_eval ignores the rank column of a run and re-sorts by
score, breaking ties by document id *descending*. A quantized model produces more equal
scores than a full-precision one, so a ranking that broke ties any other way would score
differently from the same run handed to trec_eval. Every constructor here therefore
re-establishes that order, vectorized, touching the document strings only where equal
scores actually occur.

"Equal" means equal as trec_eval sees them: trec_eval keeps a run's scores in a C
``float``, so two float64 scores that round to the same float32 are a tie (pytrec_eval
ranks ``1.0`` and ``1.000000001`` by document id). :func:`trec_score` is that rounding;
orderings compare it, while ``scores`` keep the values as given (a float32 search's scores
are unchanged by it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain, count, repeat
from operator import methodcaller

import numpy as np

from evalq.core.errors import InputError

_VALUES = methodcaller("values")  # C-level ``m.values()`` for map()


@dataclass(frozen=True)
class Ranking:
    query_ids: tuple[str, ...]
    doc_ids: tuple[str, ...]
    indices: np.ndarray  # int64, shape (n_queries, depth); -1 = empty slot
    scores: np.ndarray  # float64, shape (n_queries, depth); nan = empty slot

    @property
    def depth(self) -> int:
        return int(self.indices.shape[1])

    # ------------------------------------------------------------------ constructors

    @classmethod
    def from_search(
        cls,
        query_ids: Sequence[str],
        doc_ids: Sequence[str],
        indices: np.ndarray,
        scores: np.ndarray,
    ) -> Ranking:
        """Wrap the ``(Q, k)`` matrices an exact search returns.

        Rows must already be ordered by score descending (what FAISS and a top-k over a
        score matrix return); only runs of *equal* scores are reordered, by document id
        descending, so the result is what trec_eval would rank. Slots with index ``-1``
        (FAISS's "no result") become empty (score ``nan``) and must come last in a row.
        Ties at the depth boundary are the search's concern: documents it did not return
        cannot be ranked here. The inputs are not modified.
        """
        query_ids = tuple(query_ids)
        doc_ids = tuple(doc_ids)
        idx = np.array(indices, dtype=np.int64, copy=True)
        sc = np.array(scores, dtype=np.float64, copy=True)
        if idx.ndim != 2 or sc.shape != idx.shape:
            raise ValueError(
                f"indices and scores must be 2-D arrays of the same shape, got "
                f"{idx.shape} and {sc.shape}"
            )
        if idx.shape[0] != len(query_ids):
            raise ValueError(f"{idx.shape[0]} rows of results for {len(query_ids)} query ids")
        if len(set(query_ids)) != len(query_ids):
            raise ValueError("query ids must be unique")
        if idx.size and (idx.max() >= len(doc_ids) or idx.min() < -1):
            raise ValueError(f"document indices must lie in [-1, {len(doc_ids)})")
        empty = idx < 0
        if np.any(empty[:, :-1] & ~empty[:, 1:]):
            raise ValueError("empty slots (index -1) must come after all results of a row")
        sc[empty] = np.nan
        if np.isnan(sc[~empty]).any():
            raise ValueError("a returned document has a NaN score")
        both = ~empty[:, :-1] & ~empty[:, 1:]
        if np.any(both & (sc[:, 1:] > sc[:, :-1])):
            raise ValueError("each row of scores must be ordered best first (descending)")
        _order_equal_scores(idx, sc, doc_ids)
        return cls(query_ids, doc_ids, idx, sc)

    @classmethod
    def from_dict(
        cls,
        run: Mapping[str, Mapping[str, float]],
        depth: int | None = None,
        doc_ids: Sequence[str] | None = None,
    ) -> Ranking:
        """Build from ``{qid: {docid: score}}`` (the shape pytrec_eval and ranx take).

        Rows follow the mapping's query order and are sorted in trec_eval order, then cut
        to ``depth`` (default: the longest query). ``doc_ids`` fixes the document
        vocabulary (e.g. the corpus order, so the ranking lines up with a prebuilt
        :class:`~evalq.measure.judged.JudgedIndex`); a run document outside it is an
        :class:`InputError`. Without it the vocabulary is the run's documents in order of
        first appearance.
        """
        query_ids = tuple(run)
        per_query = [run[q] for q in query_ids]
        lengths = np.fromiter(map(len, per_query), dtype=np.int64, count=len(per_query))
        total = int(lengths.sum())
        docs = list(chain.from_iterable(per_query))
        scores = np.fromiter(
            chain.from_iterable(map(_VALUES, per_query)), dtype=np.float64, count=total
        )
        if np.isnan(scores).any():
            raise InputError("a run score is NaN", field="score",
                             fix="give every retrieved document a numeric score")
        if doc_ids is None:
            # One C-level pass: each new id gets the next integer, in order of appearance.
            interned: defaultdict[str, int] = defaultdict(count().__next__)
            codes = np.fromiter(map(interned.__getitem__, docs), dtype=np.int64, count=total)
            vocabulary = tuple(interned)
        else:
            vocabulary = tuple(doc_ids)
            lookup = dict(zip(vocabulary, range(len(vocabulary)), strict=True))
            codes = np.fromiter(map(lookup.get, docs, repeat(-1)), dtype=np.int64, count=total)
            if total and codes.min() < 0:
                missing = docs[int(np.argmin(codes))]
                raise InputError(
                    f"run document {missing!r} is not in the document collection "
                    f"({int((codes < 0).sum())} such entries)",
                    field="docid",
                    fix="rank only documents of the corpus, or pass doc_ids=None",
                )
        rows = np.repeat(np.arange(len(query_ids), dtype=np.int64), lengths)
        order = np.lexsort((-trec_score(scores), rows))
        longest = int(lengths.max()) if total else 0
        if depth is not None and depth < 1:
            raise ValueError("depth must be >= 1")
        width = longest if depth is None else depth
        starts = np.zeros(len(query_ids), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        cols = np.arange(total, dtype=np.int64) - np.repeat(starts, lengths)
        sorted_codes, sorted_scores = codes[order], scores[order]
        if width < longest:
            # Keep only what can reach the top ``width``: the first ``width`` slots and
            # anything tied with the last of them (tie order is settled below).
            has_boundary = lengths > width
            boundary = np.full(len(query_ids), np.nan)
            boundary[has_boundary] = trec_score(sorted_scores[starts[has_boundary] + width - 1])
            keep = (cols < width) | (trec_score(sorted_scores) == boundary[rows])
            rows, sorted_codes, sorted_scores = rows[keep], sorted_codes[keep], sorted_scores[keep]
            kept = np.bincount(rows, minlength=len(query_ids))
            kept_starts = np.zeros(len(query_ids), dtype=np.int64)
            np.cumsum(kept[:-1], out=kept_starts[1:])
            cols = np.arange(len(rows), dtype=np.int64) - np.repeat(kept_starts, kept)
            longest = int(kept.max()) if len(rows) else 0
        idx = np.full((len(query_ids), longest), -1, dtype=np.int64)
        sc = np.full(idx.shape, np.nan)
        idx[rows, cols] = sorted_codes
        sc[rows, cols] = sorted_scores
        _order_equal_scores(idx, sc, vocabulary)
        if idx.shape[1] >= width:
            idx, sc = idx[:, :width], sc[:, :width]
        else:
            pad = width - idx.shape[1]
            idx = np.pad(idx, ((0, 0), (0, pad)), constant_values=-1)
            sc = np.pad(sc, ((0, 0), (0, pad)), constant_values=np.nan)
        return cls(query_ids, vocabulary, np.ascontiguousarray(idx), np.ascontiguousarray(sc))

    # ------------------------------------------------------------------ conversions

    def to_dict(self) -> dict[str, dict[str, float]]:
        """``{qid: {docid: score}}`` with documents in rank order (empty slots dropped)."""
        out: dict[str, dict[str, float]] = {}
        doc_ids = self.doc_ids
        for qid, row_idx, row_sc in zip(self.query_ids, self.indices.tolist(),
                                        self.scores.tolist(), strict=True):
            out[qid] = {doc_ids[i]: s for i, s in zip(row_idx, row_sc, strict=True) if i >= 0}
        return out


def trec_score(scores: np.ndarray) -> np.ndarray:
    """Scores as trec_eval compares them: rounded to float32 (its C ``float``)."""
    return np.asarray(scores, dtype=np.float64).astype(np.float32)


def _order_equal_scores(idx: np.ndarray, sc: np.ndarray, doc_ids: Sequence[str]) -> None:
    """In place: within each row already sorted by score descending, reorder every run of
    equal scores (equal as float32, see :func:`trec_score`) by document id descending.

    Only tied slots are touched: their document strings are ranked with ``np.unique`` and
    the tied slots re-sorted as one flat batch (group, then id descending), so a ranking
    without ties costs one vectorized comparison.
    """
    if idx.shape[1] < 2:
        return
    if not (idx.flags.c_contiguous and sc.flags.c_contiguous):
        raise ValueError("tie ordering works in place on C-contiguous arrays")
    key = trec_score(sc)
    equal_next = key[:, 1:] == key[:, :-1]  # nan != nan: empty slots never tie
    if not equal_next.any():
        return
    tied = np.zeros(idx.shape, dtype=bool)
    tied[:, 1:] |= equal_next
    tied[:, :-1] |= equal_next
    flat_pos = np.flatnonzero(tied)  # row-major, so each tie group is contiguous
    # A new group starts at a tied slot whose left neighbour is not tied with it.
    starts_group = np.ones(idx.shape, dtype=bool)
    starts_group[:, 1:] = ~equal_next
    group = np.cumsum(starts_group.ravel()[flat_pos])
    tied_docs = idx.ravel()[flat_pos]
    names = np.array([doc_ids[i] for i in tied_docs.tolist()])
    _, name_rank = np.unique(names, return_inverse=True)
    new_order = np.lexsort((-name_rank.ravel(), group))
    idx.ravel()[flat_pos] = tied_docs[new_order]
    sc.ravel()[flat_pos] = sc.ravel()[flat_pos][new_order]
