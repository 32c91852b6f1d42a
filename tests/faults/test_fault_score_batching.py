"""Fault class "a cached score the recipe would not produce": the score cache keyed a
reranker's scores by the reranker alone, while torch and ONNX Runtime dynamic int8 set one
activation scale per batch, so their scores depend on which pairs share a batch. A rerun
with other batching (``batch_tokens``) was served the old run's scores. A batch-dependent
reranker's scores are now keyed by the batching too; an invariant one keeps sharing them.
"""

from __future__ import annotations

import numpy as np
import pytest

from evalq.encode.composition import reranker_batch_dependent
from evalq.encode.pairs import score_pairs
from evalq.encode.scorecache import ScoreCache
from evalq.plan.pipelines import RerankerVariant

QS = ["q one", "q one", "q two", "q three", "q three", "q three"]
DS = ["doc a", "a longer document b", "doc c", "doc d", "document e here", "f"]


class _PerBatchScale:
    """Scores that move with the batch, as one activation scale per batch makes them."""

    kind = "cross-encoder"

    def fingerprint(self) -> str:
        return "per-batch-scale"

    def pair_lengths(self, queries, documents):
        return [len(q.split()) + len(d.split()) + 3 for q, d in zip(queries, documents)]

    def score(self, queries, documents):
        scale = 1.0 + 0.01 * len(queries)
        return np.array([len(q) * 0.1 + len(d) * 0.01 * scale
                         for q, d in zip(queries, documents)])


@pytest.mark.parametrize(("variant", "dependent"), [
    ({"backend": "inprocess", "quantization": {"method": "torch-dynamic-int8"}}, True),
    ({"backend": "inprocess", "quantization": {"method": "bitsandbytes", "bits": 8}}, True),
    ({"backend": "onnx", "quantization": {"method": "ort-dynamic-int8"}}, True),
    ({"backend": "inprocess"}, False),
    ({"backend": "onnx"}, False),
    ({"backend": "tei", "http": {"url": "http://127.0.0.1:9"}}, False),
    ({"backend": "rerank-api", "http": {"url": "http://127.0.0.1:9"}}, False),
])
def test_which_rerankers_are_keyed_by_their_batching(variant, dependent) -> None:
    assert reranker_batch_dependent(RerankerVariant(name="v", **variant)) is dependent


def _scored(tmp_path, batch_tokens: int, dependent: bool):
    cache = ScoreCache(tmp_path)
    try:
        return score_pairs(_PerBatchScale(), QS, DS, cache=cache, batch_tokens=batch_tokens,
                           max_batch=256, batch_dependent=dependent)
    finally:
        cache.close()


def test_other_batching_rescored_for_a_batch_dependent_reranker(tmp_path) -> None:
    first, _ = _scored(tmp_path, 2048, True)  # one batch
    second, stats = _scored(tmp_path, 16, True)  # a few pairs per batch
    assert stats.cached == 0 and stats.computed == len(set(zip(QS, DS)))
    assert not np.allclose(first, second)  # what this batching really gives
    again, stats = _scored(tmp_path, 16, True)
    assert stats.cached == len(QS) and np.array_equal(again, second)


def test_an_invariant_reranker_keeps_sharing_scores_across_batching(tmp_path) -> None:
    first, _ = _scored(tmp_path, 2048, False)
    second, stats = _scored(tmp_path, 16, False)
    assert stats.computed == 0 and np.array_equal(first, second)
