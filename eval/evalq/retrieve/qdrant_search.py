"""Searching Qdrant points, one query at a time: what the in-process shard
(:class:`evalq.retrieve.qdrant_kind.QdrantIndex`) and a server's collection
(:class:`evalq.retrieve.qdrant_server.QdrantServerIndex`) share.

Both answer one query vector with points (an ``id``, the document's row, and a ``score``);
only how a query is asked differs (``_ask``). Each query is timed on its own, so a sweep
and ``evalq load``'s sequential reference read per-query seconds; distances (Euclid,
Manhattan) become scores, higher better, as every other index kind reports them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from evalq.core.ranking import Ranking
from evalq.retrieve import workers
from evalq.retrieve.kinds import Queries
from evalq.retrieve.qdrant_options import LOWER_IS_BETTER, QdrantOptions, SearchParams
from evalq.retrieve.serverwatch import ServerWatch, own_process


@dataclass(frozen=True)
class SearchedRows:
    """One search of many query vectors: document positions and scores, best first
    (-1 / NaN where fewer than ``depth`` came back), and each query's seconds."""

    idx: np.ndarray
    scores: np.ndarray
    query_s: np.ndarray
    seconds: float

    @property
    def missing(self) -> int:
        return int((self.idx < 0).sum())


def search_rows(vectors: np.ndarray, depth: int, distance: str,
                ask: Callable[[list[float]], Iterable[Any]]) -> SearchedRows:
    """Each query vector asked in turn (``ask``: one query's points), timed per query."""
    idx = np.full((len(vectors), depth), -1, dtype=np.int64)
    scores = np.full((len(vectors), depth), np.nan, dtype=np.float64)
    sign = -1.0 if distance in LOWER_IS_BETTER else 1.0
    query_s = np.zeros(len(vectors), dtype=np.float64)
    began = time.perf_counter()
    for row, vector in enumerate(vectors):
        asked = time.perf_counter()
        found = ask(vector.tolist())
        query_s[row] = time.perf_counter() - asked
        for col, point in enumerate(found):
            idx[row, col], scores[row, col] = int(point.id), sign * point.score
    seconds = time.perf_counter() - began
    order = np.argsort(-np.nan_to_num(scores, nan=-np.inf), axis=1, kind="stable")
    return SearchedRows(np.take_along_axis(idx, order, 1),
                        np.take_along_axis(scores, order, 1), query_s, seconds)


class PointsSearch:
    """The searching half of a Qdrant index. A subclass sets ``options`` and ``_ids``
    (the documents in point-id order) and answers :meth:`_ask`; it may wrap
    :meth:`_rows` to turn its engine's errors into exit 2."""

    options: QdrantOptions
    _ids: tuple[str, ...]

    def _init_search(self) -> None:
        self._params: SearchParams = self.options.search_params
        self._query_s = np.zeros(0, dtype=np.float64)
        self._search_s = 0.0
        self._queries = self._missing = 0

    def _ask(self, vector: list[float], depth: int, wanted: SearchParams) -> Iterable[Any]:
        raise NotImplementedError

    def _rows(self, vectors: np.ndarray, depth: int, wanted: SearchParams) -> SearchedRows:
        return search_rows(vectors, depth, self.options.distance,
                           lambda vector: self._ask(vector, depth, wanted))

    def search(self, queries: Queries, depth: int, params: Any = None) -> Ranking:
        if queries.vectors is None:
            raise ValueError("a Qdrant index is searched with query vectors; these have none")
        wanted: SearchParams = params if params is not None else self.options.search_params
        self._params = wanted
        rows = self._rows(np.ascontiguousarray(queries.vectors, dtype=np.float32), depth,
                          wanted)
        self._query_s, self._search_s = rows.query_s, rows.seconds
        self._queries, self._missing = len(rows.idx), rows.missing
        return Ranking.from_search(queries.ids, self._ids, rows.idx, rows.scores)

    def search_timed(self, queries: Queries, depth: int, params: Any
                     ) -> tuple[Ranking, np.ndarray]:
        """:meth:`search` at ``params``, with each query's seconds."""
        ranking = self.search(queries, depth, params)
        return ranking, self._query_s.copy()

    def nearest(self, vector: np.ndarray, depth: int) -> tuple[str, ...]:
        """One query at the options' ``search_params``: the documents' ids, best first
        (a concurrent worker's search under ``evalq load``: :mod:`evalq.retrieve.workers`)."""
        found = self._ask(np.asarray(vector, dtype=np.float32).tolist(), depth,
                          self.options.search_params)
        sign = -1.0 if self.options.distance in LOWER_IS_BETTER else 1.0
        ranked = sorted(found, key=lambda p: -sign * p.score)  # stable: ties keep order
        return tuple(self._ids[int(p.id)] for p in ranked)

    def server_watch(self) -> ServerWatch:
        """The in-process shard: no server process of its own (a server's index says
        what of it can be watched)."""
        return own_process()

    def connections_left(self) -> None:
        """No limit evalq can read (threads share the shard, or one pooled client)."""
        return None

    def alive(self) -> bool:
        """The in-process shard lives as long as evalq does."""
        return True

    def worker(self, timeout_s: float) -> workers.SharedWorker:
        """A thread's worker on the one shard or client (no timeout of its own)."""
        return workers.SharedWorker(self.nearest)


__all__ = ["PointsSearch", "SearchedRows", "search_rows"]
