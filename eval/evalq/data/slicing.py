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
  :mod:`evalq.data.assemble`). When ``max_docs`` is too small for all relevant documents the
  dropped relevant judgments are counted in ``source["slice"]`` and warned about.

The slice gets a new fingerprint; ``source["slice"]`` records the limits and the parent
fingerprint so a result on a slice is never mistaken for one on the full data.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from evalq.core.dataset import Corpus, Dataset, Qrels, Queries
from evalq.core.errors import InputError
from evalq.data.assemble import DatasetWarning
from evalq.data.fingerprint import fingerprint


def check_limit(value: int | None, field: str) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise InputError(
            f"must be a positive integer, got {value!r}",
            field=field,
            fix=f"pass {field} >= 1, or leave it unset for no limit",
        )


def choose_documents(doc_ids: Sequence[str], qrels: Qrels, query_ids: Sequence[str],
                     n_docs: int) -> tuple[list[int], int]:
    """Row numbers of the documents a slice keeps, in corpus order (module docstring), and
    how many relevant documents the kept queries have. Needs ids only, so a streamed
    corpus slices without its texts."""
    position = {docid: i for i, docid in enumerate(doc_ids)}
    chosen: list[int] = []
    chosen_set: set[int] = set()
    for qid in query_ids:
        for docid, rel in qrels.judgments.get(qid, {}).items():
            index = position.get(docid)
            if rel >= 1 and index is not None and index not in chosen_set:
                chosen.append(index)
                chosen_set.add(index)
    relevant_total = len(chosen)
    chosen = chosen[:n_docs]
    chosen_set = set(chosen)
    for index in range(len(doc_ids)):
        if len(chosen) >= n_docs:
            break
        if index not in chosen_set:
            chosen.append(index)
            chosen_set.add(index)
    return sorted(chosen), relevant_total


def restrict_judgments(qrels: Qrels, query_ids: Sequence[str], doc_ids: Sequence[str],
                       kept_ids: set[str]) -> tuple[dict[str, dict[str, int]], int]:
    """The kept queries' judgments on kept documents (and on documents the full corpus
    never had), and how many relevant judgments the cut dropped."""
    in_corpus = set(doc_ids)
    judgments: dict[str, dict[str, int]] = {}
    dropped_relevant = 0
    for qid in query_ids:
        per_query = qrels.judgments.get(qid)
        if per_query is None:
            continue
        judgments[qid] = {
            d: r for d, r in per_query.items() if d in kept_ids or d not in in_corpus
        }
        dropped_relevant += sum(
            1 for d, r in per_query.items() if r >= 1 and d not in kept_ids and d in in_corpus
        )
    return judgments, dropped_relevant


def slice_record(name: str, max_queries: int | None, max_docs: int | None, queries: int,
                 documents: int, parent_fingerprint: str, relevant_total: int,
                 dropped_relevant: int) -> dict[str, object]:
    """``source["slice"]`` of a slice; warns when the cut dropped relevant judgments."""
    if dropped_relevant:
        warnings.warn(
            f"dataset {name!r}: max_docs={max_docs} is smaller than the "
            f"{relevant_total} relevant documents of the kept queries; {dropped_relevant} "
            "relevant judgments dropped from the slice",
            DatasetWarning,
            stacklevel=3,
        )
    return {
        "max_queries": max_queries,
        "max_docs": max_docs,
        "queries": queries,
        "documents": documents,
        "parent_fingerprint": parent_fingerprint,
        "dropped_relevant_judgments": dropped_relevant,
    }


def slice_dataset(
    ds: Dataset, max_queries: int | None = None, max_docs: int | None = None
) -> Dataset:
    """Return ``ds`` cut to at most ``max_queries`` queries and ``max_docs`` documents.

    With both limits unset (or not cutting anything) the dataset is returned unchanged.
    """
    check_limit(max_queries, "max_queries")
    check_limit(max_docs, "max_docs")
    n_queries = len(ds.queries) if max_queries is None else min(max_queries, len(ds.queries))
    n_docs = len(ds.corpus) if max_docs is None else min(max_docs, len(ds.corpus))
    if n_queries == len(ds.queries) and n_docs == len(ds.corpus):
        return ds

    query_ids = ds.queries.ids[:n_queries]
    queries = Queries(ids=query_ids, texts=ds.queries.texts[:n_queries])
    kept, relevant_total = choose_documents(ds.corpus.ids, ds.qrels, query_ids, n_docs)
    corpus = Corpus(
        ids=tuple(ds.corpus.ids[i] for i in kept),
        titles=tuple(ds.corpus.titles[i] for i in kept),
        texts=tuple(ds.corpus.texts[i] for i in kept),
    )
    judgments, dropped_relevant = restrict_judgments(ds.qrels, query_ids, ds.corpus.ids,
                                                     set(corpus.ids))
    qrels = Qrels(judgments=judgments)
    source = dict(ds.source)
    source["slice"] = slice_record(ds.name, max_queries, max_docs, len(queries), len(corpus),
                                   ds.fingerprint, relevant_total, dropped_relevant)
    return Dataset(
        name=ds.name,
        corpus=corpus,
        queries=queries,
        qrels=qrels,
        fingerprint=fingerprint(corpus, queries, qrels),
        source=source,
    )
