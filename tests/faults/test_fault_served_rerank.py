"""Fault class "served reranker": every served reranker kind a pipeline names
(``backend: tei``, ``backend: rerank-api``) is built the way a run builds it
(``evalq.encode.pairs.build_reranker``) and scores real pairs against a real local server.

Every such run used to end in exit 3 (``KeyError: no embedding backend 'rerank-api' is
registered``) before a pair was sent: the bi-encoder scorer's cache composition was asked of
every reranker variant, and a served reranker's backend is no embedding backend. The last
round's fixes for malformed replies (a bool, string, null or NaN score; a model redeployed
behind the same URL) were unreachable behind it, so they are proved here again through the
built reranker.

The server is a stand-in, not TEI: text-embeddings-inference cannot run on these machines
(no Docker, no Rust build). ``tests/support/fake_rerank_server.py`` follows TEI's
``/rerank`` and the
Cohere/Jina ``/v1/rerank`` documented schemas and scores with sentence-transformers'
CrossEncoder on the fixture checkpoint (the session's one ``rerank_server``). vLLM's served
reranker (``vllm: {mode: server}``) is driven through the same builder against a real vLLM
server in ``tests/engines/test_vllm_rerank_server.py``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from faultkit import TINY, no_traceback, run_cli

from evalq.core.errors import InputError
from evalq.encode.pairs import build_reranker, score_pairs
from evalq.encode.scorecache import ScoreCache
from evalq.plan.pipelines import RerankerSpec, RerankerVariant
from support import recipes

pytestmark = pytest.mark.model  # the fixture cross-encoder behind the stand-in

SERVED = ["tei", "rerank-api"]
QS = ["what is a list", "what is a list", "how to sort", "how to sort"]
DS = ["A list is a mutable sequence of items.", "The Eiffel Tower is in Paris.",
      "sorted() returns a new sorted list.", "Water boils at 100 degrees."]
SCORE_KEY = {"tei": "score", "rerank-api": "relevance_score"}


def _built(server: Any, style: str, model_path: Path, tmp_path: Path) -> Any:
    spec = RerankerSpec(model=str(model_path), max_length=256,
                        candidates=[RerankerVariant(name=style, backend=style,
                                                    http={"url": server.url, "model": "m"})])
    reranker, _, batches_itself = build_reranker(spec, spec.candidates[0], model_path, "cpu",
                                                 cache_dir=tmp_path)
    assert batches_itself  # a served reranker schedules its own batches
    return reranker


@pytest.mark.parametrize("style", SERVED)
def test_each_served_reranker_kind_is_built_and_scores_like_the_model(
        rerank_server, cross_encoder_path, tmp_path, style) -> None:
    reranker = _built(rerank_server, style, cross_encoder_path, tmp_path)
    try:
        got, stats = score_pairs(reranker, QS, DS, self_batching=True)
    finally:
        reranker.close()
    expected = rerank_server.scores(QS[0], DS[:2], raw=False) + \
        rerank_server.scores(QS[2], DS[2:], raw=False)
    assert stats.computed == len(QS)
    np.testing.assert_allclose(got, expected, atol=1e-5)


LIES = {"true": True, "string": "0.5", "null": None, "nan": math.nan}


@pytest.mark.parametrize("style", SERVED)
@pytest.mark.parametrize("lie", list(LIES))
def test_a_malformed_score_reaches_the_reply_check_and_is_exit_2(
        rerank_server, cross_encoder_path, tmp_path, style, lie) -> None:
    def rewrite(path: str, body: Any) -> Any:
        items = body if style == "tei" else body["results"]
        items[0][SCORE_KEY[style]] = LIES[lie]
        return body

    reranker = _built(rerank_server, style, cross_encoder_path, tmp_path)
    rerank_server.state.rewrite = rewrite
    try:
        with pytest.raises(InputError) as info:
            score_pairs(reranker, QS, DS, self_batching=True)
    finally:
        rerank_server.state.rewrite = None
        reranker.close()
    assert info.value.field is not None and info.value.field.endswith(SCORE_KEY[style])
    assert rerank_server.url in info.value.message and info.value.fix


class _Shifted:
    """The fixture model redeployed with every score moved: another model, same URL."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def predict(self, pairs: Any, **options: Any) -> list[float]:
        return [float(s) + 0.25 for s in self.inner.predict(pairs, **options)]


@pytest.mark.parametrize("style", SERVED)
def test_a_model_redeployed_behind_the_url_is_scored_again(
        rerank_server, cross_encoder_path, tmp_path, style) -> None:
    original = rerank_server.state.model
    runs = []
    try:
        for model in (original, _Shifted(original)):
            rerank_server.state.model = model
            reranker = _built(rerank_server, style, cross_encoder_path, tmp_path)
            cache = ScoreCache(tmp_path / "scores")
            try:
                runs.append(score_pairs(reranker, QS, DS, cache=cache, self_batching=True))
            finally:
                cache.close()
                reranker.close()
    finally:
        rerank_server.state.model = original
    (first, _), (second, stats) = runs
    assert stats.cached == 0 and stats.computed == len(QS)
    np.testing.assert_allclose(second - first, 0.25, atol=1e-5)


@pytest.mark.slow
def test_a_pipeline_of_served_rerankers_runs_end_to_end(
        rerank_server, cross_encoder_path, tmp_path, capsys) -> None:
    """``evalq run`` with a tei and a rerank-api candidate beside the in-process reference:
    exit 0 and, since the stand-in scores with the same checkpoint, rankings that agree."""
    candidates = [{"name": style.replace("-", ""), "backend": style,
                   "http": {"url": rerank_server.url, "model": "m"}} for style in SERVED]
    pipeline = {"name": "bm25-served", "first_stage": {"kind": "bm25"}, "depths": [5],
                "cutoff": 5, "metrics": ["nDCG@5"], "fidelity_metrics": ["score_tau"],
                "reranker": {"model": str(cross_encoder_path), "max_length": 256,
                             "candidates": candidates}}
    data = recipes.recipe(
        "served-rerank", datasets=[{"name": "tiny", "source": "beir", "path": str(TINY),
                                    "split": "test"}],
        cache=tmp_path / "cache", output=tmp_path / "out", candidates=[],
        metrics=["nDCG@10"], reference_metrics=["overlap@10"], resamples=100,
        parity={"enabled": False}, pipelines=[pipeline])
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(data))
    outcome = run_cli(capsys, "run", str(path), folder=tmp_path / "out")
    assert outcome.code == 0, outcome.err
    assert no_traceback(outcome.err)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    text = json.dumps(summary["pipelines"]["bm25-served"])
    for candidate in candidates:
        assert f"+{candidate['name']}@5" in text
