"""A search-time parameter swept over one built index (issue 30, "a parameter sweep as a
curve").

A team tunes ``ef_search`` / ``probes`` / ``hnsw_ef`` / ``oversampling`` / ``efSearch`` /
``nprobe`` on an index it has already built and loaded: rebuilding per value would time
and judge a different graph at every point, and cost the ingest k times. So a kind whose
options declare ``sweep:`` (:class:`evalq.retrieve.kinds.SweepOptions`) is built once
by the run, searched at its own configured settings (the variant's run, unchanged), and
then searched again here at each swept value through
:meth:`~evalq.retrieve.kinds.SweptIndex.search_timed`, with the options validated at that
value (:meth:`~evalq.retrieve.kinds.KindOptions.at`). Each point keeps its ranking, each
query's seconds and the index's proof at that setting (a value at which the database fell
back to an exhaustive scan says so).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from evalq.core.ranking import Ranking
from evalq.retrieve.kinds import Index, IndexProof, KindOptions, Queries


@dataclass(frozen=True)
class SweepPoint:
    """One swept value's search: its ranking, each query's seconds, and the proof."""

    value: float
    ranking: Ranking
    seconds: np.ndarray
    proof: IndexProof

    def latency(self) -> dict[str, float | None]:
        """p50 / p99 per query (milliseconds) and queries/s over the sequential searches."""
        if not len(self.seconds):
            return {"p50_ms": None, "p99_ms": None, "queries_per_s": None}
        total = float(self.seconds.sum())
        return {"p50_ms": float(np.percentile(self.seconds, 50) * 1e3),
                "p99_ms": float(np.percentile(self.seconds, 99) * 1e3),
                "queries_per_s": len(self.seconds) / total if total > 0 else None}


def sweep_index(index: Index, options: KindOptions, queries: Queries, depth: int
                ) -> tuple[str, tuple[SweepPoint, ...]] | None:
    """Search the built ``index`` at each value of ``options``' sweep (None: no sweep).
    The kinds that declare ``sweep:`` implement ``search_timed``; one that does not is
    evalq's bug (exit 3), not the recipe's."""
    sweep = options.sweep_options()
    if sweep is None:
        return None
    timed: Any = getattr(index, "search_timed", None)
    if timed is None:
        raise TypeError(f"index kind '{options.kind}' declares sweep: but its index has no "
                        "search_timed")
    name, values = sweep.parameter()
    points = []
    for value in values:
        ranking, seconds = timed(queries, depth, options.at(value).search_options())
        points.append(SweepPoint(value, ranking, np.asarray(seconds, dtype=np.float64),
                                 index.proof()))
    return name, tuple(points)
