"""The onnx backend (ONNX Runtime, CPU) against the in-process reference on the real MiniLM.

fp32 must equal in-process fp32 (cosine >= 0.99999 per text, truncated texts included),
through a whole run on a slice of the quickstart's corpus (identical top-10 per query),
and through ``evalq parity``. The quantization methods are gated like any candidate:
the run below only checks that they build, calibrate on corpus documents (never the
judged queries) and record what they did. Bad input exits 2 naming the file and fix.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import numpy as np
import pytest
from tests.support import recipes
from tests.support.certified_draws import assert_certified_draw_needs_no_corpus

from evalq.app.cli import main
from evalq.core.errors import InputError, MissingExtraError
from evalq.engines.context import BuildContext
from evalq.engines.inprocess import InProcessEncoder
from evalq.engines.onnx_backend import build
from evalq.engines.options import OnnxOptions
from evalq.engines.quantize import validate_quantization
from evalq.engines.quantize.onnx_graph import GRAPH_FILE, export_onnx, require
from evalq.engines.quantize.ort_dynamic import quantizer_logging
from evalq.recipe.schema import Variant

pytestmark = pytest.mark.model


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="session")
def onnx_ctx(minilm_path, minilm_settings, onnx_cache, mixed_texts):
    pairs = [(f"doc{i}", t) for i, t in enumerate(mixed_texts)]
    return BuildContext(minilm_path, minilm_settings, onnx_cache / "logs", "cpu", onnx_cache,
                        calibration=lambda n, seed: pairs[:n])


@pytest.fixture(scope="session")
def onnx_fp32(onnx_ctx):
    encoder = build(Variant(name="onnx", backend="onnx"), onnx_ctx)
    yield encoder
    encoder.close()


@pytest.fixture(scope="module")
def inprocess_fp32(minilm_path, minilm_settings):
    encoder = InProcessEncoder(minilm_path, settings=minilm_settings)
    yield encoder
    encoder.close()


def test_fp32_equals_inprocess_per_text(onnx_fp32, inprocess_fp32, mixed_texts):
    # Odd batches of mixed lengths: padding inside a batch must not move a vector.
    ours = np.concatenate([onnx_fp32.embed(mixed_texts[i:i + 7])
                           for i in range(0, len(mixed_texts), 7)])
    ref = inprocess_fp32.embed(mixed_texts)
    cosine = np.sum(ours * ref, axis=1)
    assert cosine.min() >= 0.99999, cosine.min()
    assert onnx_fp32.token_lengths(mixed_texts) == inprocess_fp32.token_lengths(mixed_texts)
    record = onnx_fp32.describe()
    info = record["graph_info"]
    assert info["opset"] == 17 and info["exporter"].startswith("torch.onnx.export")
    assert info["versions"]["onnxruntime"] and info["versions"]["onnx"]
    assert record["quantization"]["method"] == "none"


def test_export_is_cached_by_weight_fingerprint(onnx_ctx, onnx_fp32):
    again = export_onnx(onnx_ctx.model_path, onnx_ctx.cache_dir / "checkpoints")
    assert again.reused and again.path == onnx_fp32.graph.path


@pytest.mark.slow
def test_a_run_on_the_quickstart_slice_ranks_identically(tmp_path, onnx_cache):
    """A whole run: ONNX fp32 keeps every query's top 10 and passes parity; the static
    int8 candidate calibrates on corpus documents the manifest names."""
    cfg = recipes.recipe(
        "onnx-slice", cache=onnx_cache, queries=150, docs=300, output=tmp_path / "out",
        candidates=[{"name": "onnx-fp32", "backend": "onnx"},
                    {"name": "ort-static", "backend": "onnx",
                     "quantization": {"method": "ort-static-int8", "calibration_texts": 32}}],
        metrics=["nDCG@10"], reference_metrics=["overlap@10", "cosine"],
        gates=[recipes.gate("overlap@10", "reference", min=1.0, stat="min",
                            variants=["onnx-fp32"]),
               recipes.gate("cosine", "reference", min=0.99999, stat="min",
                            variants=["onnx-fp32"])],
        resamples=200)
    path = recipes.write(tmp_path / "r.yaml", cfg)
    assert main(["run", str(path)]) == 0
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    described = manifest["variants"]["ort-static"]["backend"]
    calibration = described["quantization"]["params"]["graph"]["calibration"]
    assert calibration["count"] == 32 == len(set(calibration["ids"]))
    assert "never the judged queries" in calibration["source"]
    assert main(["parity", str(path)]) == 0


def test_calibration_draws_corpus_documents_only():
    from evalq.core.dataset import Corpus, Dataset, Qrels, Queries
    from evalq.execute.calibration_sample import corpus_calibration

    corpus = Corpus(tuple(f"d{i}" for i in range(50)), ("",) * 50,
                    tuple(f"document {i}" for i in range(50)))
    queries = Queries(("q1",), ("a judged query",))
    ds = Dataset("set", corpus, queries, Qrels({"q1": {"d3": 1}}), "fp")
    draw = corpus_calibration([ds], " ")
    picked = draw(10, 0)
    assert len(picked) == 10 and picked == draw(10, 0) != draw(10, 1)
    assert all(i.startswith("d") and t.startswith("document") for i, t in picked)
    assert [int(i[1:]) for i, _ in picked] == sorted(int(i[1:]) for i, _ in picked)
    assert len(draw(500, 0)) == 50


@pytest.mark.parametrize("method", ["ort-dynamic-int8", "ort-static-int8", "ort-optimize"])
def test_methods_derive_a_recorded_graph(method, onnx_ctx, mixed_texts, inprocess_fp32):
    encoder = build(Variant(name="q", backend="onnx", quantization={"method": method}),
                    onnx_ctx)
    try:
        vectors = encoder.embed(mixed_texts[:16])
    finally:
        encoder.close()
    cosine = np.sum(vectors * inprocess_fp32.embed(mixed_texts[:16]), axis=1)
    info = encoder.record.params["graph"]
    assert encoder.record.method == method and info["method"] == method
    assert info["parent"]["opset"] == 17
    if method == "ort-optimize":  # float32 fusions: equal up to rounding
        assert cosine.min() >= 0.99999 and info["fused_operators"]
    else:  # int8 moves vectors (how far is the gate's call, not this test's)
        assert encoder.record.bits == 8 and 0.8 < cosine.min() < 0.99999
    if method == "ort-static-int8":
        assert info["calibration"]["ids"] == [f"doc{i}" for i in range(128)][:len(mixed_texts)]


def test_a_certified_draw_finds_the_cached_static_graph_without_the_corpus(onnx_ctx):
    """As for OpenVINO's NNCF graph (tests/engines/test_openvino_backend.py): the digest a
    certificate records keys the cached static int8 graph, and the corpus is not read."""
    assert_certified_draw_needs_no_corpus(build, Variant(
        name="q", backend="onnx",
        quantization={"method": "ort-static-int8", "calibration_texts": 16}), onnx_ctx, 16)


def test_quantizer_logging_leaves_the_root_logger_as_it_found_it(monkeypatch, capsys):
    """ONNX Runtime's quantizer calls ``logging.warning``, which on a bare root logger
    installs a stderr handler for good; inside ``quantizer_logging`` its messages print
    once each, its pre-processing advice is dropped, and the root stays bare."""
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    with quantizer_logging():
        logging.warning("Please consider to run pre-processing before quantization. Refer")
        logging.warning("Please use QuantFormat.QDQ for activation type QInt8")
    assert root.handlers == []
    err = capsys.readouterr().err
    assert "pre-processing" not in err
    assert err.count("QuantFormat.QDQ") == 1 and "onnxruntime.quantization: warning" in err


# ---------------------------------------------------------------------------- bad input

def test_user_graph_is_accepted(onnx_ctx, onnx_fp32, mixed_texts, tmp_path):
    mine = tmp_path / "model.onnx"
    mine.write_bytes(onnx_fp32.graph.path.read_bytes())
    encoder = build(Variant(name="u", backend="onnx", onnx=OnnxOptions(file=str(mine))),
                    onnx_ctx)
    try:
        assert np.array_equal(encoder.embed(mixed_texts[:5]), onnx_fp32.embed(mixed_texts[:5]))
        assert encoder.describe()["graph_info"]["exporter"] == "user file"
    finally:
        encoder.close()


def test_truncated_graph_exits_2_naming_the_file(onnx_ctx, onnx_fp32, tmp_path):
    broken = tmp_path / GRAPH_FILE
    data = onnx_fp32.graph.path.read_bytes()
    broken.write_bytes(data[: len(data) // 3])
    with pytest.raises(InputError) as caught:
        build(Variant(name="u", backend="onnx", onnx=OnnxOptions(file=str(broken))), onnx_ctx)
    assert str(broken) in str(caught.value) and "corrupt or truncated" in str(caught.value)
    assert caught.value.fix


def test_graph_of_the_wrong_width_exits_2(onnx_ctx, tmp_path):
    import torch

    class Narrow(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(40000, 7)

        def forward(self, input_ids, attention_mask):
            return self.embed(input_ids) * attention_mask.unsqueeze(-1)

    path = tmp_path / "narrow.onnx"
    ids = torch.ones((2, 5), dtype=torch.int64)
    torch.onnx.export(Narrow().eval(), (ids, ids), str(path),
                      input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state"], dynamo=False,
                      dynamic_axes={"input_ids": {0: "b", 1: "s"},
                                    "attention_mask": {0: "b", 1: "s"}})
    with pytest.raises(InputError) as caught:
        encoder = build(Variant(name="u", backend="onnx", onnx=OnnxOptions(file=str(path))),
                        onnx_ctx)
        encoder.embed(["a text"])
    assert "hidden size is 384" in str(caught.value) and str(path) in str(caught.value)


def test_calibration_on_an_empty_corpus_exits_2(onnx_ctx):
    empty = dataclasses.replace(onnx_ctx, calibration=lambda n, seed: [])
    with pytest.raises(InputError) as caught:
        build(Variant(name="s", backend="onnx",
                      quantization={"method": "ort-static-int8"}), empty)
    assert "corpora are empty" in caught.value.message and caught.value.fix


def test_missing_library_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(MissingExtraError) as caught:
        require("onnxruntime", "onnx", "the onnx backend")
    assert "pip install 'evalq[onnx]'" in str(caught.value)


@pytest.mark.parametrize("quantization, words", [
    ({"method": "ort-optimize", "level": "O4"}, "float16"),
    ({"method": "ort-dynamic-int8", "config": "sse4"}, "avx512_vnni"),
])
def test_refused_when_the_recipe_is_read(tmp_path, capsys, quantization, words):
    with pytest.raises(InputError):
        validate_quantization(quantization["method"],
                              {k: v for k, v in quantization.items() if k != "method"})
    cfg = recipes.recipe("bad", cache=tmp_path, candidates=[
        {"name": "c", "backend": "onnx", "quantization": quantization}])
    assert main(["validate", str(recipes.write(tmp_path / "r.yaml", cfg))]) == 2
    assert words in capsys.readouterr().err
