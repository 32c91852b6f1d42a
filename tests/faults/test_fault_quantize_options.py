"""Fault class "quantization options that do the opposite of their words".

ONNX Runtime reads an empty ``nodes_to_quantize`` as every node and an empty operator list
as its default set, and leaves an operator it does not know in float. So ``skip: ['.*']``
("keep every MatMul float") quantized every MatMul, ``operators: [NoSuchOp]`` wrote an fp32
graph recorded as "bits 8", and ``operators: []`` quantized ORT's defaults. Each is now
exit 2 when the recipe is read, naming the file, the field and the fix; a pattern only the
graph can judge (one that matches every MatMul of it) is exit 2 before quantizing; and the
record counts what was quantized (8-bit weights and float MatMul weights, with bytes).

The same place now refuses the method parameters that passed validate and failed later:
``seed: -1`` (exit 3 in the run), ``calibration_texts: true`` (read as 1), an invalid
regular expression in ``skip`` (exit 3), and a pipeline reranker's ``calibration_texts: 0``
(refused only after the run had loaded its models).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from faultkit import no_traceback, recipe_data, run_cli

from support import recipes

STATIC = "ort-static-int8"
DYNAMIC = "ort-dynamic-int8"

# (quantization, backend, the field the refusal names, words of the message)
EMBEDDING_CASES: dict[str, tuple[dict[str, Any], str, str, str]] = {
    "skip every node": ({"method": STATIC, "skip": [".*"]}, "onnx", "skip", "every node"),
    "skip any character": ({"method": STATIC, "skip": ["."]}, "onnx", "skip", "every node"),
    "skip empty pattern": ({"method": STATIC, "skip": ["layer", ""]}, "onnx", "skip",
                           "skip[1]"),
    "skip bad regex": ({"method": STATIC, "skip": ["layer.(0"]}, "onnx", "skip",
                       "not a regular expression"),
    "unknown operator": ({"method": DYNAMIC, "operators": ["NoSuchOp"]}, "onnx", "operators",
                         "NoSuchOp"),
    "lower-case operator": ({"method": STATIC, "operators": ["matmul"]}, "onnx", "operators",
                            "matmul"),
    "empty operators": ({"method": DYNAMIC, "operators": []}, "onnx", "operators",
                        "default operator set"),
    "operator evalq never hands over": ({"method": DYNAMIC, "operators": ["Gather"]}, "onnx",
                                        "operators", "quantize nothing"),
    "static extra operator": ({"method": STATIC, "operators": ["MatMul", "Gather"]}, "onnx",
                              "operators", "leave Gather float"),
    "negative seed": ({"method": STATIC, "seed": -1}, "onnx", "seed", "greater than"),
    "nncf negative seed": ({"method": "nncf-int8", "seed": -1}, "openvino", "seed",
                           "greater than"),
    "calibration true": ({"method": STATIC, "calibration_texts": True}, "onnx",
                         "calibration_texts", "integer"),
    "nncf calibration true": ({"method": "nncf-int8", "calibration_texts": True}, "openvino",
                              "calibration_texts", "integer"),
}


def _validate(capsys: Any, tmp_path: Path, data: dict[str, Any]) -> Any:
    recipe = recipes.write(tmp_path / "recipe.yaml", data)
    outcome = run_cli(capsys, "validate", str(recipe))
    assert no_traceback(outcome.err), outcome.err
    return outcome, recipe


@pytest.mark.parametrize("case", list(EMBEDDING_CASES))
def test_an_embedding_variants_option_is_refused_when_read(tmp_path, capsys, case) -> None:
    quantization, backend, field, words = EMBEDDING_CASES[case]
    data = recipe_data(tmp_path, candidates=[{"name": "q", "backend": backend,
                                              "quantization": quantization}], gates=[])
    outcome, recipe = _validate(capsys, tmp_path, data)
    assert outcome.code == 2, outcome.err
    assert f"candidates.0.quantization.{field}" in outcome.err
    assert str(recipe) in outcome.err and words in outcome.err
    assert "Fix:" in outcome.err or "fix" in outcome.err.lower()


RERANKER_CASES: dict[str, tuple[dict[str, Any], str, str]] = {
    "nncf calibration zero": ({"method": "nncf-int8", "calibration_texts": 0}, "openvino",
                              "calibration_texts"),
    "static seed negative": ({"method": STATIC, "seed": -1}, "onnx", "seed"),
    "static skip everything": ({"method": STATIC, "skip": [".*"]}, "onnx", "skip"),
    "dynamic unknown operator": ({"method": DYNAMIC, "operators": ["NoSuchOp"]}, "onnx",
                                 "operators"),
}


@pytest.mark.parametrize("case", list(RERANKER_CASES))
def test_a_pipeline_rerankers_option_is_refused_when_read(tmp_path, capsys, case) -> None:
    quantization, backend, field = RERANKER_CASES[case]
    pipeline = {"name": "p", "first_stage": {"kind": "bm25"}, "depths": [5], "cutoff": 5,
                "metrics": ["nDCG@5"],
                "reranker": {"model": "fixture:minilm-cross-encoder", "candidates": [
                    {"name": "q", "backend": backend, "quantization": quantization}]}}
    data = recipe_data(tmp_path, candidates=[], gates=[])
    data["pipelines"] = [pipeline]
    outcome, recipe = _validate(capsys, tmp_path, data)
    assert outcome.code == 2, outcome.err
    assert f"pipelines.0.reranker.candidates.0.quantization.{field}" in outcome.err
    assert str(recipe) in outcome.err


def test_the_operator_lists_are_onnx_runtimes() -> None:
    """The operators accepted are exactly those the installed quantizers know."""
    registry = pytest.importorskip("onnxruntime.quantization.registry")
    from evalq.engines.quantize.ort_nodes import DYNAMIC_OPERATORS, STATIC_OPERATORS

    assert set(DYNAMIC_OPERATORS) == set(registry.IntegerOpsRegistry)
    assert set(STATIC_OPERATORS) == set(registry.QDQRegistry)


def test_the_defaults_and_the_documented_forms_are_accepted(tmp_path, capsys) -> None:
    candidates = [{"name": "dyn", "backend": "onnx", "quantization": {"method": DYNAMIC}},
                  {"name": "dyn-all", "backend": "onnx",
                   "quantization": {"method": DYNAMIC, "operators": ["MatMul", "Gather"],
                                    "nodes": "all"}},
                  {"name": "st", "backend": "onnx",
                   "quantization": {"method": STATIC, "skip": [r"layer\.[0-2]/", "pooler"],
                                    "seed": 7, "calibration_texts": 16}}]
    data = recipe_data(tmp_path, candidates=candidates, gates=[])
    outcome, _ = _validate(capsys, tmp_path, data)
    assert outcome.code == 0, outcome.err


# ---- what only the graph can tell: built on the real MiniLM export --------------------

@pytest.fixture(scope="module")
def onnx_ctx(minilm_path, minilm_settings, tmp_path_factory, mixed_texts):
    from evalq.engines.context import BuildContext

    cache = tmp_path_factory.mktemp("quantize-options")
    pairs = [(f"doc{i}", t) for i, t in enumerate(mixed_texts)]
    return BuildContext(minilm_path, minilm_settings, cache / "logs", "cpu", cache,
                        calibration=lambda n, seed: pairs[:n])


def _graph_record(ctx: Any, quantization: dict[str, Any]) -> Any:
    from evalq.engines.onnx_backend import build
    from evalq.recipe.schema import Variant

    encoder = build(Variant(name="q", backend="onnx", quantization=quantization), ctx)
    encoder.close()
    return encoder.record


# MiniLM-L6: 6 layers x 6 Linear layers (q, k, v, attention output, up, down); the export
# ends at the token states, so the pooler is not in the graph
LINEARS, DOWN_PROJECTIONS = 36, 6


@pytest.mark.model
def test_the_record_counts_what_was_quantized(onnx_ctx) -> None:
    dynamic = _graph_record(onnx_ctx, {"method": DYNAMIC})
    counts = dynamic.params["graph"]["quantized"]
    assert counts["int8_weights"] == LINEARS and counts["float_matmul_weights"] == 0
    assert counts["int8_bytes"] > 0 and counts["float_matmul_bytes"] == 0
    assert dynamic.params["graph"]["nodes_named"] == LINEARS
    static = _graph_record(onnx_ctx, {"method": STATIC, "calibration_texts": 4})
    counts = static.params["graph"]["quantized"]
    # the default skip keeps the feed-forward down-projections float, as its words say
    assert counts["int8_weights"] == LINEARS - DOWN_PROJECTIONS
    assert counts["float_matmul_weights"] == DOWN_PROJECTIONS
    assert counts["float_matmul_bytes"] == DOWN_PROJECTIONS * 1536 * 384 * 4
    assert static.params["graph"]["nodes_named"] == LINEARS - DOWN_PROJECTIONS


@pytest.mark.model
def test_a_skip_covering_every_matmul_of_the_graph_is_exit_2(onnx_ctx) -> None:
    """'MatMul' names no node in general, but every MatMul of an export: ORT would have
    read the empty node list as 'quantize all'."""
    from evalq.core.errors import InputError

    with pytest.raises(InputError) as info:
        _graph_record(onnx_ctx, {"method": STATIC, "skip": ["MatMul"],
                                 "calibration_texts": 4})
    assert info.value.field == "quantization.skip" and "every MatMul" in info.value.message
    assert info.value.fix
