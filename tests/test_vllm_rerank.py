"""vLLM's ``LLM.score()`` as a reranker, against the in-process cross-encoder at fp32.

The cross-encoder is the fixture (MiniLM encoder + seeded head): its scores measure
fidelity between backends, not relevance. One engine at a time: the session's embedding
engine is closed first.
"""

from __future__ import annotations

import numpy as np
import pytest

from evalq.backends.reranker import CrossEncoderReranker, RerankSettings
from evalq.errors import InputError


@pytest.mark.vllm
def test_vllm_score_equals_inprocess_at_fp32(vllm_engine_pool, mixed_texts, tmp_path_factory):
    from evalq.backends.vllm_rerank import VllmEngineReranker
    from evalq.rerank import score_pairs
    from evalq.rerank_fixture import build_minilm_cross_encoder

    model = build_minilm_cross_encoder(tmp_path_factory.mktemp("vllm-rerank-models"))
    queries = [t[:50] for t in mixed_texts[:4]]
    qs = [queries[i % 4] for i in range(16)]
    ds = [mixed_texts[(5 + 3 * i) % len(mixed_texts)] for i in range(16)]  # some > 256 tokens
    reference = CrossEncoderReranker(model, settings=RerankSettings())
    try:
        expected = reference.score(qs, ds)
    finally:
        reference.close()
    vllm_engine_pool.close()  # one engine alive at a time
    engine = VllmEngineReranker(model, settings=RerankSettings(), kind="cross-encoder")
    try:
        got, _ = score_pairs(engine, qs, ds, self_batching=True)
        raw = VllmEngineReranker.score(engine, qs[:2], ds[:2])
        described = engine.describe()
    finally:
        engine.close()
    assert np.abs(got - expected).max() <= 1e-4
    assert np.allclose(raw, got[:2])
    assert described["request"]["use_activation"] is True
    assert described["request"]["tokenization_kwargs"]["max_length"] == 256


def test_vllm_scoring_refuses_softmax_before_starting(tmp_path):
    from evalq.backends.vllm_rerank import VllmEngineReranker

    with pytest.raises(InputError) as info:
        VllmEngineReranker(tmp_path, settings=RerankSettings(activation="softmax", label=1),
                           kind="cross-encoder")
    assert info.value.field == "reranker.activation"
