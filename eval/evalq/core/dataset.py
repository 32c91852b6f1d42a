"""The typed values every dataset source produces.

Ids are strings everywhere (BEIR and TREC ids such as ``"0001"`` must not become ints);
texts are kept exactly as read. What gets encoded is decided by :meth:`Corpus.texts_for_encoding`,
not by the loaders.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Corpus:
    """Documents in a stable order; ``titles[i]`` may be empty."""

    ids: tuple[str, ...]
    titles: tuple[str, ...]
    texts: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.ids)

    def texts_for_encoding(self, title_separator: str | None = " ") -> list[str]:
        """BEIR's convention: ``title + " " + text`` when a title exists.

        ``title_separator=None`` encodes the body alone.
        """
        return [encoding_text(title, text, title_separator)
                for title, text in zip(self.titles, self.texts, strict=True)]

    def encoding_pairs(self, title_separator: str | None = " ") -> Iterator[tuple[str, str]]:
        """``(id, text to encode)`` in corpus order; a streamed corpus
        (:class:`evalq.data.streamed.StreamedCorpus`) yields the same pairs from disk."""
        return zip(self.ids, self.texts_for_encoding(title_separator), strict=True)


def encoding_text(title: str, text: str, title_separator: str | None) -> str:
    """BEIR's convention: ``title + separator + text`` when a title exists; the body alone
    when there is none or ``title_separator`` is ``None``."""
    if title and title_separator is not None:
        return f"{title}{title_separator}{text}"
    return text


@dataclass(frozen=True)
class Queries:
    ids: tuple[str, ...]
    texts: tuple[str, ...]

    def __len__(self) -> int:
        return len(self.ids)


@dataclass(frozen=True)
class Qrels:
    """Human judgments ``{query_id: {doc_id: relevance}}`` (trec_eval semantics:
    relevance >= 1 is relevant, the level is the gain)."""

    judgments: Mapping[str, Mapping[str, int]]

    def query_ids(self) -> list[str]:
        return list(self.judgments)


@dataclass(frozen=True)
class Dataset:
    """One evaluation set. ``fingerprint`` hashes ids and texts (and judgments) so a
    reader of any result knows exactly which data produced it."""

    name: str
    corpus: Corpus
    queries: Queries
    qrels: Qrels
    fingerprint: str
    source: Mapping[str, Any] = field(default_factory=dict)
