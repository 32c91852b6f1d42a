"""Deterministic slices of a dataset, for tests and ``--max-queries`` / ``--max-docs``.

A slice must still be a fair retrieval task: the kept queries' relevant documents are
kept before any distractor, otherwise a small ``max_docs`` would leave queries with
nothing to find and every variant would score 0 (measuring nothing). Order:

* queries: the first ``max_queries`` in dataset order (stable);
* documents: first the documents judged relevant (level >= 1) for the kept queries, in
  the order those queries come, then the remaining documents in corpus order, up to
  ``max_docs``; the kept documents keep their corpus order;
* judgments: restricted to the kept queries and to documents in the sliced corpus (plus
  judgments of documents the full corpus never had, which the full dataset keeps too, see
  :mod:`evalq.datasets.assemble`). When ``max_docs`` is too small for all relevant documents the
  dropped relevant judgments are counted in ``source["slice"]`` and warned about.

The slice gets a new fingerprint; ``source["slice"]`` records the limits and the parent
fingerprint so a result on a slice is never mistaken for one on the full data.
"""

from __future__ import annotations

import warnings

from evalq.datasets.assemble import DatasetWarning
from evalq.datasets.fingerprint import fingerprint
from evalq.datasets.types import Corpus, Dataset, Qrels, Queries
from evalq.errors import InputError


def _check_limit(value: int | None, field: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InputError(
            f"must be a positive integer, got {value!r}",
            field=field,
            fix=f"pass {field} >= 1, or leave it unset for no limit",
        )


def slice_dataset(
    ds: Dataset, max_queries: int | None = None, max_docs: int | None = None
) -> Dataset:
    """Return ``ds`` cut to at most ``max_queries`` queries and ``max_docs`` documents.

    With both limits unset (or not cutting anything) the dataset is returned unchanged.
    """
    _check_limit(max_queries, "max_queries")
    _check_limit(max_docs, "max_docs")
    n_queries = len(ds.queries) if max_queries is None else min(max_queries, len(ds.queries))
    n_docs = len(ds.corpus) if max_docs is None else min(max_docs, len(ds.corpus))
    if n_queries == len(ds.queries) and n_docs == len(ds.corpus):
        return ds

    query_ids = ds.queries.ids[:n_queries]
    queries = Queries(ids=query_ids, texts=ds.queries.texts[:n_queries])

    position = {docid: i for i, docid in enumerate(ds.corpus.ids)}
    chosen: list[int] = []
    chosen_set: set[int] = set()
    for qid in query_ids:
        for docid, rel in ds.qrels.judgments.get(qid, {}).items():
            index = position.get(docid)
            if rel >= 1 and index is not None and index not in chosen_set:
                chosen.append(index)
                chosen_set.add(index)
    relevant_total = len(chosen)
    chosen = chosen[:n_docs]
    chosen_set = set(chosen)
    for index in range(len(ds.corpus)):
        if len(chosen) >= n_docs:
            break
        if index not in chosen_set:
            chosen.append(index)
            chosen_set.add(index)
    kept = sorted(chosen)
    corpus = Corpus(
        ids=tuple(ds.corpus.ids[i] for i in kept),
        titles=tuple(ds.corpus.titles[i] for i in kept),
        texts=tuple(ds.corpus.texts[i] for i in kept),
    )

    kept_ids = set(corpus.ids)
    judgments: dict[str, dict[str, int]] = {}
    dropped_relevant = 0
    for qid in query_ids:
        per_query = ds.qrels.judgments.get(qid)
        if per_query is None:
            continue
        judgments[qid] = {
            d: r for d, r in per_query.items() if d in kept_ids or d not in position
        }
        dropped_relevant += sum(
            1 for d, r in per_query.items() if r >= 1 and d not in kept_ids and d in position
        )
    if dropped_relevant:
        warnings.warn(
            f"dataset {ds.name!r}: max_docs={max_docs} is smaller than the "
            f"{relevant_total} relevant documents of the kept queries; {dropped_relevant} "
            "relevant judgments dropped from the slice",
            DatasetWarning,
            stacklevel=2,
        )
    qrels = Qrels(judgments=judgments)
    source = dict(ds.source)
    source["slice"] = {
        "max_queries": max_queries,
        "max_docs": max_docs,
        "queries": len(queries),
        "documents": len(corpus),
        "parent_fingerprint": ds.fingerprint,
        "dropped_relevant_judgments": dropped_relevant,
    }
    return Dataset(
        name=ds.name,
        corpus=corpus,
        queries=queries,
        qrels=qrels,
        fingerprint=fingerprint(corpus, queries, qrels),
        source=source,
    )
