"""OpenAI-compatible and TEI HTTP clients: payloads, batching, retries, failures, secrets.

TEI cannot run on these machines, so the TEI client is tested against a local stand-in
(``fake_embedding_server.py``) that follows TEI's documented ``/info`` and ``/embed``
schema and computes real MiniLM embeddings with sentence-transformers. The OpenAI client
is tested against the same stand-in here and against the real vLLM server in
``test_vllm_server.py``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import pytest

from evalq.core.errors import BackendUnavailableError, InputError
from evalq.encode.batching import encode_texts
from evalq.encode.cache import EmbeddingCache
from evalq.engines.openai_http import OpenAIEncoder
from evalq.engines.tei_http import TeiEncoder
from support.fake_embedding_server import FakeState, fake_server, refused_url, silent_server

SECRET = "sk-evalq-test-7f3a9c-never-in-files"


@pytest.fixture(scope="module")
def st_model(minilm_path: Path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_path), device="cpu")


@pytest.fixture(scope="module")
def texts(mixed_texts):
    """15 real texts, 5 of them far over MiniLM's 256 tokens (kept small: CI has 2 cores)."""
    return mixed_texts[0:40:4] + mixed_texts[40:45]


@pytest.fixture(scope="module")
def reference(st_model, texts):
    return st_model.encode(texts, normalize_embeddings=True, convert_to_numpy=True)


def _fast(**kw):
    return {"timeout_s": 60.0, "retries": 2, "backoff_s": 0.05, **kw}


# --------------------------------------------------------------------------- TEI


@pytest.mark.model
def test_tei_matches_sentence_transformers_within_client_batch(
    st_model, minilm_path, minilm_settings, texts, reference
):
    with fake_server(FakeState(st_model, max_client_batch_size=8)) as server:
        enc = TeiEncoder(server.url, settings=minilm_settings, tokenizer_path=minilm_path,
                         **_fast(concurrency=3))
        vectors = enc.embed(texts)
        posts = [r for r in server.state.requests if r.path == "/embed"]
    cos = np.sum(vectors * reference, axis=1)
    assert cos.min() >= 0.9999
    assert max(len(r.payload["inputs"]) for r in posts) <= 8
    assert sum(len(r.payload["inputs"]) for r in posts) == len(texts)
    sent = posts[0].payload
    assert sent["normalize"] is True and sent["truncate"] is True
    assert sent["truncation_direction"] == "Right"
    info = enc.describe()["info"]
    assert info["max_client_batch_size"] == 8 and enc.max_batch == 8
    # Over-length texts were really truncated (the limit is 256 tokens).
    assert max(enc.token_lengths(texts)) == minilm_settings.max_length


@pytest.mark.model
def test_tei_left_truncation_is_sent_and_changes_long_texts(
    st_model, minilm_settings, texts, reference
):
    left = dataclasses.replace(minilm_settings, truncation_side="left")
    with fake_server(FakeState(st_model)) as server:
        vectors = TeiEncoder(server.url, settings=left, **_fast()).embed(texts)
        sent = [r.payload for r in server.state.requests if r.path == "/embed"]
    assert {p["truncation_direction"] for p in sent} == {"Left"}
    cos = np.sum(vectors * reference, axis=1)
    n_tokens = np.array([len(ids) for ids in st_model.tokenizer(texts)["input_ids"]])
    over = n_tokens > minilm_settings.max_length
    assert over.sum() >= 5
    assert cos[~over].min() >= 0.9999  # short texts: untouched
    assert cos[over].max() < 0.999  # long texts: a different window of tokens


@pytest.mark.model
def test_tei_refuses_mismatched_pooling_and_length(st_model, minilm_settings):
    with fake_server(FakeState(st_model, pooling="cls")) as server, \
            pytest.raises(InputError) as err:
        TeiEncoder(server.url, settings=minilm_settings, **_fast())
    assert err.value.field == "pooling" and "cls" in str(err.value)
    with fake_server(FakeState(st_model, max_input_length=512)) as server, \
            pytest.raises(InputError) as err:
        TeiEncoder(server.url, settings=minilm_settings, **_fast())
    assert err.value.field == "max_length" and "512" in str(err.value)


# --------------------------------------------------------------------------- OpenAI


@pytest.mark.model
def test_openai_orders_by_index_and_decodes_base64(st_model, minilm_settings, texts,
                                                   reference):
    with fake_server(FakeState(st_model)) as server:
        plain = OpenAIEncoder(server.url + "/v1", "minilm", settings=minilm_settings,
                              **_fast(max_batch=7, concurrency=4)).embed(texts)
        b64 = OpenAIEncoder(server.url, "minilm", settings=minilm_settings,
                            encoding_format="base64", **_fast(max_batch=7)).embed(texts)
        sent = [r.payload for r in server.state.requests if r.path == "/v1/embeddings"]
    assert np.sum(plain * reference, axis=1).min() >= 0.9999
    np.testing.assert_array_equal(plain, b64)
    assert max(len(p["input"]) for p in sent) <= 7
    assert any(p.get("encoding_format") == "base64" for p in sent)


@pytest.mark.model
def test_openai_retries_429_and_5xx_then_succeeds(st_model, minilm_settings):
    state = FakeState(st_model, fail_next=[429, 503, 502])
    with fake_server(state) as server:
        enc = OpenAIEncoder(server.url, "m", settings=minilm_settings,
                            **_fast(retries=3, concurrency=1))
        out = enc.embed(["a query about retries"])
    assert out.shape == (1, 384)
    assert len([r for r in state.requests if r.path == "/v1/embeddings"]) == 4


def test_refused_connection_retries_then_input_error_naming_url():
    url = refused_url()
    enc = OpenAIEncoder(url, "m", settings=_settings(), **_fast(retries=2))
    with pytest.raises(InputError) as err:
        enc.embed(["x"])
    text = str(err.value)
    assert url in text and "3 attempts" in text and "connection failed" in text


def test_unresolvable_host_is_input_error():
    enc = OpenAIEncoder("http://no-such-host.invalid:8080", "m", settings=_settings(),
                        **_fast(retries=1))
    with pytest.raises(InputError) as err:
        enc.embed(["x"])
    assert "no-such-host.invalid" in str(err.value)


def test_timeout_retries_then_input_error_naming_cause():
    with silent_server() as url:
        enc = OpenAIEncoder(url, "m", settings=_settings(),
                            **_fast(timeout_s=0.3, retries=1))
        started = time.monotonic()
        with pytest.raises(InputError) as err:
            enc.embed(["x"])
        elapsed = time.monotonic() - started
    assert url in str(err.value) and "timeout" in str(err.value)
    assert elapsed >= 0.6  # two attempts, each waited for its timeout


def test_tei_unreachable_at_start_is_input_error():
    url = refused_url()
    with pytest.raises(InputError) as err:
        TeiEncoder(url, settings=_settings(), **_fast(retries=1))
    assert f"{url}/info" in str(err.value)


@pytest.mark.model
def test_server_dying_mid_run_is_backend_unavailable_and_rerun_resumes(
    st_model, minilm_settings, texts, reference, tmp_path
):
    cache = EmbeddingCache(tmp_path / "cache")
    state = FakeState(st_model, die_after=2)
    with fake_server(state) as server:
        enc = OpenAIEncoder(server.url, "m", settings=minilm_settings, identity="fixed",
                            **_fast(max_batch=4, concurrency=1))
        with pytest.raises(BackendUnavailableError) as err:
            encode_texts(enc, texts, role="document", cache=cache, chunk_size=4,
                         batch_tokens=100_000, max_batch=4, progress=False)
    assert server.url in str(err.value) and "resume" in str(err.value)
    finished = state.answered
    with fake_server(FakeState(st_model)) as again:
        enc2 = OpenAIEncoder(again.url, "m", settings=minilm_settings, identity="fixed",
                             **_fast(max_batch=4))
        assert enc2.fingerprint() == enc.fingerprint()
        result = encode_texts(enc2, texts, role="document", cache=cache, chunk_size=4,
                              batch_tokens=100_000, max_batch=4, progress=False)
        recomputed = sum(len(r.payload["input"]) for r in again.state.requests
                         if r.path == "/v1/embeddings")
    assert result.stats.chunks_cached == finished
    assert recomputed == len(set(texts)) - 4 * finished
    assert np.sum(result.vectors * reference, axis=1).min() >= 0.9999


# --------------------------------------------------------------------------- secrets


@pytest.mark.model
def test_api_key_is_sent_but_never_written(st_model, minilm_settings, texts, tmp_path,
                                           monkeypatch, caplog):
    monkeypatch.setenv("EVALQ_TEST_KEY", SECRET)
    run = tmp_path / "run"
    run.mkdir()
    with fake_server(FakeState(st_model, api_key=SECRET)) as server:
        enc = OpenAIEncoder(server.url, "m", settings=minilm_settings,
                            api_key_env="EVALQ_TEST_KEY", **_fast())
        res = encode_texts(enc, texts[:10], role="query",
                           cache=EmbeddingCache(run / "cache"), progress=False)
        tei = TeiEncoder(server.url, settings=minilm_settings, api_key_env="EVALQ_TEST_KEY",
                         **_fast())
        tei.embed(texts[:3])
        auth = {r.authorization for r in server.state.requests}
        # A wrong key: the server says 401 -> InputError, which must not echo the key.
        monkeypatch.setenv("EVALQ_TEST_KEY", SECRET + "-wrong")
        wrong = OpenAIEncoder(server.url, "m", settings=minilm_settings,
                              api_key_env="EVALQ_TEST_KEY", **_fast())
        with pytest.raises(InputError) as err:
            wrong.embed(["x"])
    with pytest.raises(InputError) as dead:
        OpenAIEncoder(refused_url(), "m", settings=minilm_settings,
                      api_key_env="EVALQ_TEST_KEY", **_fast(retries=0)).embed(["x"])
    assert auth == {f"Bearer {SECRET}"}
    assert res.vectors.shape == (10, 384)
    manifest = {"openai": enc.describe(), "tei": tei.describe(), "repr": repr(enc._http),
                "errors": [str(err.value), repr(err.value), str(dead.value)],
                "log": caplog.text}
    (run / "manifest.json").write_text(json.dumps(manifest, default=str))
    assert enc.describe()["api_key_env"] == "EVALQ_TEST_KEY"
    leaked = [p for p in run.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]
    assert leaked == []


def test_missing_api_key_variable_is_input_error(monkeypatch):
    monkeypatch.delenv("EVALQ_TEST_ABSENT", raising=False)
    with pytest.raises(InputError) as err:
        OpenAIEncoder("http://127.0.0.1:1", "m", settings=_settings(),
                      api_key_env="EVALQ_TEST_ABSENT")
    assert "EVALQ_TEST_ABSENT" in str(err.value)


def _settings():
    from evalq.core.values import EncodingSettings

    return EncodingSettings()
