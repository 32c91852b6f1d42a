"""vLLM's OpenAI server as a reranker (evalq starts it), against the in-process
cross-encoder at fp32: ``/score``, ``/rerank`` and ``/v1/rerank`` on one server start.

The cross-encoder is the fixture (MiniLM encoder + seeded head): its scores measure
fidelity between backends, not relevance. One vLLM process at a time: the session's
embedding engine is closed first, and the server is stopped at the end of the test.
"""

from __future__ import annotations

import numpy as np
import psutil
import pytest

from evalq.core.errors import InputError
from evalq.engines.reranker import CrossEncoderReranker, RerankSettings
from evalq.plan.pipelines import RerankerSpec, RerankerVariant


@pytest.mark.server
@pytest.mark.vllm
def test_vllm_server_scores_equal_inprocess_at_fp32(vllm_engine_pool, mixed_texts,
                                                     tmp_path_factory):
    from evalq.encode.pairs import build_reranker, score_pairs
    from evalq.engines.rerank_fixture import build_minilm_cross_encoder
    from evalq.engines.rerank_http import HttpReranker
    from evalq.engines.vllm_rerank_server import VllmServerReranker

    model = build_minilm_cross_encoder(tmp_path_factory.mktemp("vllm-server-rerank-models"))
    queries = [t[:50] for t in mixed_texts[:3]]
    qs = [queries[i % 3] for i in range(9)]
    ds = [mixed_texts[-1 - i] if i % 2 else mixed_texts[5 + 3 * i]  # half > 256 tokens
          for i in range(9)]
    expected = {}
    for activation in ("sigmoid", "none"):
        reference = CrossEncoderReranker(model, settings=RerankSettings(activation=activation))
        try:
            expected[activation] = reference.score(qs, ds)
            lengths = reference.pair_lengths(qs, ds)
        finally:
            reference.close()
    assert max(lengths) == 256  # truncation is exercised, not only short pairs
    vllm_engine_pool.close()  # one vLLM process alive at a time
    # Built as a pipeline builds it (backend vllm, mode server), so the recipe path to a
    # served reranker is driven against the real server (issue 32: every served reranker
    # crashed in the builder before a pair was sent).
    spec = RerankerSpec(model=str(model), max_length=256, candidates=[RerankerVariant(
        name="srv", backend="vllm", vllm={"mode": "server", "max_batch": 4})])
    served, _, batches_itself = build_reranker(
        spec, spec.candidates[0], model, "cpu",
        logs_dir=tmp_path_factory.mktemp("vllm-rerank-logs"),
        cache_dir=tmp_path_factory.mktemp("vllm-rerank-cache"))
    assert isinstance(served, VllmServerReranker) and batches_itself
    pid = served.server.pid
    try:
        got, stats = score_pairs(served, qs, ds, self_batching=True)
        described = served.describe()
        others = {}
        for route in ("/rerank", "/v1/rerank"):
            for activation in ("sigmoid", "none"):
                client = HttpReranker(
                    served.server.url, style="rerank-api", model=served.server.served_model_name,
                    activation=activation, max_length=256, route=route,
                    extra_fields={"truncate_prompt_tokens": 256,
                                  "use_activation": activation == "sigmoid"})
                try:
                    others[(route, activation)] = client.score(qs, ds)
                finally:
                    client.close()
    finally:
        served.close()
    assert np.abs(got - expected["sigmoid"]).max() <= 1e-4
    for (route, activation), scores in others.items():
        assert np.abs(scores - expected[activation]).max() <= 1e-4, (route, activation)
    assert np.abs(expected["none"] - expected["sigmoid"]).max() > 0.1  # the field matters
    assert stats.computed == 9 and stats.forward_calls == 3  # one request per query
    assert described["backend"] == "vllm-server" and described["route"] == "/score"
    assert described["request_fields"]["use_activation"] is True
    assert described["request_fields"]["truncate_prompt_tokens"] == 256
    assert "--pooler-config" not in described["server"]["command"]
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


@pytest.mark.parametrize(("settings", "route", "field"), [
    (RerankSettings(activation="softmax", label=1), "/score", "reranker.activation"),
    (RerankSettings(truncation="only_second"), "/score", "reranker.truncation"),
    (RerankSettings(), "/v1/scores", "reranker.vllm.route"),
])
def test_vllm_server_reranker_refuses_before_starting(tmp_path, settings, route, field):
    from evalq.engines.vllm_rerank_server import VllmServerReranker

    with pytest.raises(InputError) as info:
        VllmServerReranker(tmp_path, settings=settings, kind="cross-encoder", log_dir=tmp_path,
                           route=route)
    assert info.value.field == field
    assert not (tmp_path / "vllm-server.log").exists()  # nothing was started


def test_recipe_selects_server_mode_and_route():
    from evalq.plan.pipelines import RerankerVariant

    variant = RerankerVariant.model_validate(
        {"name": "vllm-srv", "backend": "vllm", "vllm": {"mode": "server", "route": "/v1/rerank"}})
    assert variant.vllm is not None and variant.vllm.mode == "server"
    with pytest.raises(ValueError, match="route"):
        RerankerVariant.model_validate(
            {"name": "x", "backend": "vllm", "vllm": {"mode": "server", "route": "/scores"}})
