"""Rankings computed by hand with numpy, to check evalq's search against: exact inner
products, ordered as evalq (and trec_eval) break ties: score compared as float32,
descending, then document id descending."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def hand_ranking(queries: np.ndarray, docs: np.ndarray, query_ids: Sequence[str],
                 doc_ids: Sequence[str], depth: int) -> dict[str, list[str]]:
    """``{query id: [document ids, best first]}`` of the top ``depth`` by ``q · d``."""
    scores = (np.asarray(queries, np.float64) @ np.asarray(docs, np.float64).T).astype(
        np.float32)
    id_rank = np.argsort(np.argsort(np.array(doc_ids, dtype=object)))  # ascending by id
    out = {}
    for row, qid in zip(scores, query_ids, strict=True):
        order = np.lexsort((-id_rank, -row))  # last key first: score desc, then id desc
        out[qid] = [doc_ids[i] for i in order[:depth]]
    return out
