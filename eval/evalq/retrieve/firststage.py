"""First stages of a pipeline that rank texts: BM25 (bm25s). Rankings already on disk (a
dense variant's run, a user's TREC run file) are read by :mod:`evalq.execute.given_runs`.

Each returns a :class:`~evalq.core.ranking.Ranking` over the dataset's corpus order plus a
record of how it was made (parameters, versions, seconds per query), which goes into the
manifest. BM25 through ``bm25s`` (pure numpy/scipy; pyserini needs a JVM): the classic
first stage of a cross-encoder pipeline, and the quickest way to show a reranker doing
real work offline. Documents that share no term with a query score 0 and are not
returned, as a lexical index would not return them.

BM25 is the ``bm25`` retrieval kind (:mod:`evalq.retrieve.kinds`): :func:`text_first_stage`
runs any registered kind that indexes texts through the index protocol.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import Field, field_validator

from evalq.core.errors import InputError, MissingExtraError
from evalq.core.ranking import Ranking
from evalq.retrieve.kinds import Documents, IndexProof, IndexStats, KindOptions, KindSpec, Queries


class Bm25Options(KindOptions):
    """bm25s parameters (a pipeline's ``first_stage: {kind: bm25, bm25: {...}}``); all of
    them go into the manifest."""

    kind: Literal["bm25"] = "bm25"
    k1: float = Field(default=1.2, gt=0, allow_inf_nan=False)
    b: float = Field(default=0.75, ge=0, le=1, allow_inf_nan=False)
    method: Literal["lucene", "robertson", "atire", "bm25l", "bm25+"] = "lucene"
    stemmer: str | None = "english"  # a PyStemmer (Snowball) language, or null
    stopwords: str | None = "en"  # bm25s stopword list name, or null
    lower: bool = True

    # Both names are checked against the library that will receive them, when the recipe
    # is read (a name bm25s does not know failed only once the corpus was tokenized).
    @field_validator("stopwords")
    @classmethod
    def _bm25s_knows(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            from bm25s.tokenization import Tokenizer
        except ImportError:  # the run names the missing extra
            return value
        try:
            Tokenizer(stopwords=value)  # bm25s's own lookup of its stopword lists
        except ValueError as exc:
            raise ValueError(f"bm25s has no stopword list '{value}' ({exc}); use a language "
                             "it ships (en, english, en_plus, de, fr, es, ...) or null") from None
        return value

    @field_validator("stemmer")
    @classmethod
    def _pystemmer_knows(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            import Stemmer
        except ImportError:
            return value
        if value not in Stemmer.algorithms():
            raise ValueError(f"PyStemmer has no stemmer '{value}'; use one of "
                             f"{', '.join(Stemmer.algorithms())}, or null")
        return value


@dataclass(frozen=True)
class FirstStageRun:
    name: str  # the first-stage variant (bm25, a dense variant's name, run)
    ranking: Ranking
    record: dict[str, Any] = field(default_factory=dict)
    seconds_per_query: float | None = None  # query-time cost, when measured
    forward_passes_per_query: int = 0  # model passes a query costs (dense: 1)


class Bm25Index:
    """A bm25s index over document texts. bm25s indexes a whole corpus at once, so
    :meth:`add` re-indexes every text held."""

    def __init__(self, options: Bm25Options, where: str) -> None:
        self.options = options
        self._tokenizer = _tokenizer(options, where)
        self._ids: tuple[str, ...] = ()
        self._texts: list[str] = []
        self._retriever: Any = None
        self._build_s = 0.0

    def add(self, docs: Documents) -> None:
        import bm25s

        if docs.texts is None:
            raise ValueError("a BM25 index is built from texts; these documents have none")
        self._ids = (*self._ids, *docs.ids)
        self._texts += list(docs.texts)
        began = time.perf_counter()
        tokens = self._tokenizer.tokenize(self._texts, return_as="tuple", show_progress=False)
        self._retriever = bm25s.BM25(k1=self.options.k1, b=self.options.b,
                                     method=self.options.method)
        self._retriever.index(tokens, show_progress=False)
        self._build_s = time.perf_counter() - began

    def search(self, queries: Queries, depth: int, params: Any = None) -> Ranking:
        if queries.texts is None:
            raise ValueError("a BM25 index is searched with query texts; these have none")
        q_ids = self._tokenizer.tokenize(list(queries.texts), update_vocab=False,
                                         return_as="ids", show_progress=False)
        k = min(depth, len(self._ids))
        unknown = self._tokenizer.get_vocab_dict().get("", None)
        indices = np.full((len(q_ids), k), -1, dtype=np.int64)
        scores = np.full((len(q_ids), k), np.nan)
        for row, ids in enumerate(q_ids):
            ids = [t for t in ids if t != unknown]
            if not ids:
                continue
            doc_scores = self._retriever.get_scores(ids)
            top = np.argsort(-doc_scores, kind="stable")[:k]
            top = top[doc_scores[top] > 0]
            indices[row, :len(top)] = top
            scores[row, :len(top)] = doc_scores[top]
        return Ranking.from_search(queries.ids, self._ids, indices, scores)

    def stats(self) -> IndexStats:
        arrays = self._retriever.scores.values() if self._retriever is not None else ()
        size = sum(int(a.nbytes) for a in arrays if isinstance(a, np.ndarray))
        return IndexStats(bytes=size, build_s=self._build_s, documents=len(self._ids))

    def proof(self) -> IndexProof:
        import bm25s

        return IndexProof(kind="bm25", exact=True, method="bm25s",
                          params={"library": "bm25s", "version": bm25s.__version__,
                                  **self.options.record(),
                                  "vocabulary": len(self._tokenizer.get_vocab_dict())})

    def close(self) -> None:
        self._retriever, self._texts = None, []


def _tokenizer(options: Bm25Options, where: str) -> Any:
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
                             field=f"{where}.stemmer",
                             fix=f"use one of: {', '.join(Stemmer.algorithms())}, or null"
                             ) from None
    return bm25s.tokenization.Tokenizer(lower=options.lower, stopwords=options.stopwords,
                                        stemmer=stemmer)


def _build(options: Bm25Options, docs: Documents, where: str) -> Bm25Index:
    index = Bm25Index(options, where)
    index.add(docs)
    return index


KIND = KindSpec(name="bm25", summary="BM25 over document texts (bm25s); a pipeline's "
                "lexical first stage", inputs="texts", options=Bm25Options, build=_build,
                exhaustive=True)


def text_first_stage(kind: KindSpec, options: KindOptions, corpus_texts: list[str],
                     doc_ids: tuple[str, ...], queries: list[str],
                     query_ids: tuple[str, ...], depth: int, *,
                     where: str = "first_stage.bm25") -> FirstStageRun:
    """A first stage through a registered kind that indexes texts: built over the
    corpus, searched with the queries; the record is the kind's proof with its build and
    search seconds."""
    index = kind.build(options, Documents(doc_ids, texts=corpus_texts), where)
    try:
        began = time.perf_counter()
        ranking = index.search(Queries(query_ids, texts=queries), depth)
        search_s = time.perf_counter() - began
        proof, stats = index.proof(), index.stats()
    finally:
        index.close()
    return FirstStageRun(
        name=kind.name, ranking=ranking,
        record={"kind": kind.name, **proof.params, "index_s": stats.build_s,
                "search_s": search_s},
        seconds_per_query=search_s / max(1, len(queries)), forward_passes_per_query=0)


def bm25(corpus_texts: list[str], doc_ids: tuple[str, ...], queries: list[str],
         query_ids: tuple[str, ...], options: Bm25Options, depth: int) -> FirstStageRun:
    """The BM25 first stage (what the benchmarks call)."""
    return text_first_stage(KIND, options, corpus_texts, doc_ids, queries, query_ids, depth)
