"""One fingerprint for every dataset source.

A result records the fingerprint of the data it was computed on, so two results can be
compared only when they name the same data. The hash covers every id and text exactly as
loaded, in corpus and query order (order decides slices and tie handling downstream), and
the judgments in sorted order (a qrels mapping has no meaningful order). Each string is
length-prefixed so that no two different datasets can serialize to the same bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from evalq.core.dataset import Corpus, Qrels, Queries

FINGERPRINT_VERSION = "evalq-dataset-v1"


def _feed(digest: hashlib._Hash, values: Iterable[str]) -> None:
    for value in values:
        data = value.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)


class DatasetDigest:
    """The fingerprint fed one corpus field at a time: all ids, then all titles, then all
    texts, then :meth:`finish` with the queries and judgments. A streamed corpus
    (:mod:`evalq.data.streamed`) feeds it pass by pass without holding the texts, and
    gets the same fingerprint as the loaded corpus."""

    def __init__(self, documents: int) -> None:
        self._digest = hashlib.sha256()
        _feed(self._digest, [FINGERPRINT_VERSION, "corpus", str(documents)])

    def feed(self, values: Iterable[str]) -> None:
        _feed(self._digest, values)

    def finish(self, queries: Queries, qrels: Qrels) -> str:
        digest = self._digest
        _feed(digest, ["queries", str(len(queries))])
        _feed(digest, queries.ids)
        _feed(digest, queries.texts)
        _feed(digest, ["qrels", str(len(qrels.judgments))])
        for qid in sorted(qrels.judgments):
            docs = qrels.judgments[qid]
            _feed(digest, [qid, str(len(docs))])
            for docid in sorted(docs):
                _feed(digest, [docid, str(int(docs[docid]))])
        return "sha256:" + digest.hexdigest()


def fingerprint(corpus: Corpus, queries: Queries, qrels: Qrels) -> str:
    """``sha256:<hex>`` over ids, titles, texts and judgments (see module docstring)."""
    digest = DatasetDigest(len(corpus))
    digest.feed(corpus.ids)
    digest.feed(corpus.titles)
    digest.feed(corpus.texts)
    return digest.finish(queries, qrels)
