"""Fault class "a cross-encoder on a checkpoint with no trained head": an embedding model
named as a pipeline's cross-encoder was refused with advice about its label count ("has 2
labels; set activation: softmax"), and following that advice ran on a randomly
initialised head, with only transformers' load report on stderr. It is now exit 2 naming
the checkpoint and ``reranker.model``, whatever the activation, before a pair is scored.
"""

from __future__ import annotations

import pytest
from faultkit import TINY, no_traceback, run_cli

from evalq.core.errors import InputError
from evalq.engines.reranker import CrossEncoderReranker, RerankSettings
from support import recipes

pytestmark = pytest.mark.model


@pytest.mark.parametrize("settings", [RerankSettings(),
                                      RerankSettings(activation="softmax", label=1)])
def test_an_embedding_model_is_no_cross_encoder(minilm_path, settings) -> None:
    with pytest.raises(InputError) as info:
        CrossEncoderReranker(minilm_path, settings=settings)
    assert info.value.field == "reranker.model"
    assert "no trained classification head" in info.value.message
    assert "bi-encoder" in (info.value.fix or "")


def test_the_fixture_cross_encoder_is_still_accepted(cross_encoder_path) -> None:
    CrossEncoderReranker(cross_encoder_path, settings=RerankSettings()).close()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["inprocess", "onnx"])
def test_a_pipeline_names_the_reranker_model(tmp_path, capsys, backend) -> None:
    pipeline = {"name": "p", "first_stage": {"kind": "bm25"}, "depths": [5], "cutoff": 5,
                "metrics": ["nDCG@5"],
                "reranker": {"model": recipes.MINILM, "activation": "softmax", "label": 1,
                             "reference": {"name": "fp32", "backend": backend}}}
    data = recipes.recipe(
        "head", datasets=[{"name": "tiny", "source": "beir", "path": str(TINY),
                           "split": "test"}],
        cache=tmp_path / "cache", output=tmp_path / "out", candidates=[],
        metrics=["nDCG@10"], resamples=100, parity={"enabled": False}, pipelines=[pipeline])
    outcome = run_cli(capsys, "run", str(recipes.write(tmp_path / "r.yaml", data)))
    assert outcome.code == 2 and no_traceback(outcome.err), outcome.err
    assert "reranker.model" in outcome.err and "classification head" in outcome.err
