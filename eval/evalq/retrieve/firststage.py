"""First stages of a pipeline that rank texts: BM25 (bm25s). Rankings already on disk (a
dense variant's run, a user's TREC run file) are read by :mod:`evalq.execute.given_runs`.

Each returns a :class:`~evalq.core.ranking.Ranking` over the dataset's corpus order plus a
record of how it was made (parameters, versions, seconds per query), which goes into the
manifest. BM25 through ``bm25s`` (pure numpy/scipy; pyserini needs a JVM): the classic
first stage of a cross-encoder pipeline, and the quickest way to show a reranker doing
real work offline. Documents that share no term with a query score 0 and are not
returned, as a lexical index would not return them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from evalq.core.errors import InputError, MissingExtraError
from evalq.core.ranking import Ranking
from evalq.retrieve.options import Bm25Options


@dataclass(frozen=True)
class FirstStageRun:
    name: str  # the first-stage variant (bm25, a dense variant's name, run)
    ranking: Ranking
    record: dict[str, Any] = field(default_factory=dict)
    seconds_per_query: float | None = None  # query-time cost, when measured
    forward_passes_per_query: int = 0  # model passes a query costs (dense: 1)


def bm25(corpus_texts: list[str], doc_ids: tuple[str, ...], queries: list[str],
         query_ids: tuple[str, ...], options: Bm25Options, depth: int) -> FirstStageRun:
    try:
        import bm25s
    except ImportError as exc:
        raise MissingExtraError("bm25s", "cpu", "the bm25 first stage") from exc
    stemmer = None
    if options.stemmer:
        try:
            import Stemmer
        except ImportError as exc:
            raise MissingExtraError("PyStemmer", "cpu", "BM25 stemming") from exc
        try:
            stemmer = Stemmer.Stemmer(options.stemmer)
        except KeyError:
            raise InputError(message=f"PyStemmer has no stemmer '{options.stemmer}'",
                             field="first_stage.bm25.stemmer",
                             fix=f"use one of: {', '.join(Stemmer.algorithms())}, or null"
                             ) from None
    tokenizer = bm25s.tokenization.Tokenizer(lower=options.lower, stopwords=options.stopwords,
                                             stemmer=stemmer)
    began = time.perf_counter()
    corpus_tokens = tokenizer.tokenize(corpus_texts, return_as="tuple", show_progress=False)
    retriever = bm25s.BM25(k1=options.k1, b=options.b, method=options.method)
    retriever.index(corpus_tokens, show_progress=False)
    index_s = time.perf_counter() - began
    began = time.perf_counter()
    q_ids = tokenizer.tokenize(queries, update_vocab=False, return_as="ids",
                               show_progress=False)
    k = min(depth, len(doc_ids))
    vocab = tokenizer.get_vocab_dict()
    unknown = vocab.get("", None)
    q_lists = [[t for t in ids if t != unknown] for ids in q_ids]
    indices = np.full((len(queries), k), -1, dtype=np.int64)
    scores = np.full((len(queries), k), np.nan)
    for row, ids in enumerate(q_lists):
        if not ids:
            continue
        doc_scores = retriever.get_scores(ids)
        top = np.argsort(-doc_scores, kind="stable")[:k]
        top = top[doc_scores[top] > 0]
        indices[row, :len(top)] = top
        scores[row, :len(top)] = doc_scores[top]
    search_s = time.perf_counter() - began
    ranking = Ranking.from_search(query_ids, doc_ids, indices, scores)
    return FirstStageRun(
        name="bm25", ranking=ranking,
        record={"kind": "bm25", "library": "bm25s", "version": bm25s.__version__,
                **options.model_dump(), "vocabulary": len(vocab), "index_s": index_s,
                "search_s": search_s},
        seconds_per_query=search_s / max(1, len(queries)), forward_passes_per_query=0)
