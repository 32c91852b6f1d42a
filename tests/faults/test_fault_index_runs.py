"""Fault class "an index variant run again, or asked for more than its index returns"
(issue 32), found with `kind: pgvector` (docs/vector-databases.md): every rerun of an
indexed variant swept its `.exact` / `.index` / `.sweepN` files as "variants no longer in
the recipe", and a `vector_type: bit` index with `rerank: 5` under nDCG@10 scored every
query on 5 documents without a word."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from evalq.core.ranking import Ranking
from evalq.execute.dataset_scoring import note_short_rankings
from evalq.results.rundir import remove_stale_variants


def test_a_kept_variants_companions_are_not_stale(tmp_path: Path) -> None:
    kept = ["c.jsonl", "c.exact.jsonl", "c.index.jsonl", "c.sweep0.jsonl",
            "c.sweep12.index.jsonl", "fp32.jsonl"]
    gone = ["old.jsonl", "old.exact.jsonl", "old.sweep0.index.jsonl"]
    folder = tmp_path / "per_query" / "tiny"
    folder.mkdir(parents=True)
    for name in kept + gone:
        (folder / name).write_text("{}\n")
    removed = remove_stale_variants(tmp_path, ["fp32", "c"])
    assert sorted(p.name for p in removed) == sorted(gone)
    assert sorted(p.name for p in folder.iterdir()) == sorted(kept)


def test_an_index_that_returns_fewer_documents_than_the_metrics_read_says_so(
        caplog: pytest.LogCaptureFixture) -> None:
    indices = np.array([[0, 1, 2, -1], [3, 2, 1, 0]])
    scores = np.where(indices >= 0, 1.0 - np.arange(4) / 10, np.nan)
    ranking = Ranking.from_search(["q1", "q2"], ["d1", "d2", "d3", "d4"], indices, scores)
    with caplog.at_level(logging.INFO, logger="evalq"):
        note_short_rankings(ranking, 4, "candidates.c.index")
    text = caplog.text
    assert "candidates.c.index" in text and "fewer than 4 documents for 1 of 2" in text
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="evalq"):
        note_short_rankings(ranking, 3, "candidates.c.index")
    assert "fewer than" not in caplog.text
