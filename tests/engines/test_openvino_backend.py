"""The openvino backend (OpenVINO CPU plugin) against the in-process reference, real MiniLM.

fp32 must equal in-process fp32 (cosine >= 0.99999 per text) and pass ``evalq parity``;
fp16 weights and NNCF int8 build, record what they did and stay close (how close is the
gate's call). A user's IR is accepted; a truncated one exits 2 naming the file.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest
from tests.support import recipes
from tests.support.certified_draws import assert_certified_draw_needs_no_corpus

from evalq.app.cli import main
from evalq.core.errors import InputError
from evalq.engines.context import BuildContext
from evalq.engines.inprocess import InProcessEncoder
from evalq.engines.openvino_backend import build
from evalq.engines.options import OpenVinoOptions
from evalq.recipe.schema import Variant

pytestmark = pytest.mark.model


@pytest.fixture(scope="session")
def ov_ctx(minilm_path, minilm_settings, tmp_path_factory, mixed_texts):
    cache = tmp_path_factory.mktemp("ov-cache")
    pairs = [(f"doc{i}", t) for i, t in enumerate(mixed_texts)]
    return BuildContext(minilm_path, minilm_settings, cache / "logs", "cpu", cache,
                        calibration=lambda n, seed: pairs[:n])


@pytest.fixture(scope="session")
def ov_fp32(ov_ctx):
    encoder = build(Variant(name="ov", backend="openvino"), ov_ctx)
    yield encoder
    encoder.close()


@pytest.fixture(scope="module")
def reference(minilm_path, minilm_settings, mixed_texts):
    encoder = InProcessEncoder(minilm_path, settings=minilm_settings)
    try:
        yield encoder.embed(mixed_texts)
    finally:
        encoder.close()


def test_fp32_equals_inprocess_per_text(ov_fp32, reference, mixed_texts):
    ours = np.concatenate([ov_fp32.embed(mixed_texts[i:i + 7])
                           for i in range(0, len(mixed_texts), 7)])
    cosine = np.sum(ours * reference, axis=1)
    assert cosine.min() >= 0.99999, cosine.min()
    described = ov_fp32.describe()
    assert described["inference_precision"] == "f32"
    assert described["graph_info"]["parent"]["opset"] == 17
    assert described["versions"]["openvino"]


@pytest.mark.parametrize("variant", [
    Variant(name="ov16", backend="openvino", dtype="float16"),
    Variant(name="ov8", backend="openvino", quantization={"method": "nncf-int8",
                                                           "calibration_texts": 16}),
], ids=["fp16", "nncf-int8"])
def test_fp16_and_int8_build_and_record(variant, ov_ctx, reference, mixed_texts):
    encoder = build(variant, ov_ctx)
    try:
        vectors = encoder.embed(mixed_texts)
    finally:
        encoder.close()
    cosine = np.sum(vectors * reference, axis=1)
    info = encoder.record.params["graph"]
    if variant.dtype == "float16":
        assert info["weights"] == "float16" and cosine.min() > 0.999
    else:
        assert encoder.record.bits == 8 and 0.8 < cosine.min() < 0.99999
        assert info["calibration"]["ids"] == [f"doc{i}" for i in range(16)]


def test_user_ir_is_accepted_and_a_truncated_one_exits_2(ov_ctx, ov_fp32, mixed_texts,
                                                          tmp_path):
    mine = tmp_path / "openvino_model.xml"
    shutil.copy(ov_fp32.graph.path, mine)
    shutil.copy(ov_fp32.graph.path.with_suffix(".bin"), mine.with_suffix(".bin"))
    user = build(Variant(name="u", backend="openvino",
                         openvino=OpenVinoOptions(file=str(mine))), ov_ctx)
    try:
        assert np.allclose(user.embed(mixed_texts[:4]), ov_fp32.embed(mixed_texts[:4]),
                           atol=1e-6)
    finally:
        user.close()
    text = mine.read_text()
    mine.write_text(text[: len(text) // 2])
    with pytest.raises(InputError) as caught:
        build(Variant(name="u", backend="openvino",
                      openvino=OpenVinoOptions(file=str(mine))), ov_ctx)
    assert str(mine) in str(caught.value) and caught.value.fix


def test_a_certified_draw_finds_the_cached_graph_without_reading_the_corpus(ov_ctx):
    """``evalq verify`` knows the digest of the certified graph's calibration draw (its
    certificate records it): with it the cached graph is found and the corpus is never
    read; a digest that keys no cached graph draws from the corpus as a run does."""
    assert_certified_draw_needs_no_corpus(build, Variant(
        name="ov8", backend="openvino",
        quantization={"method": "nncf-int8", "calibration_texts": 16}), ov_ctx, 16)


def test_int8_on_an_empty_corpus_exits_2(ov_ctx):
    empty = dataclasses.replace(ov_ctx, calibration=lambda n, seed: [])
    with pytest.raises(InputError, match="corpora are empty"):
        build(Variant(name="s", backend="openvino",
                      quantization={"method": "nncf-int8"}), empty)


@pytest.mark.slow
def test_parity_command_covers_onnx_and_openvino(tmp_path: Path, ov_ctx):
    cfg = recipes.recipe("parity-formats", cache=ov_ctx.cache_dir, queries=20, docs=40,
                         candidates=[{"name": "onnx-fp32", "backend": "onnx"},
                                     {"name": "ov-fp32", "backend": "openvino"}])
    assert main(["parity", str(recipes.write(tmp_path / "r.yaml", cfg))]) == 0


def test_the_engine_default_precision_is_what_the_plan_says(ov_ctx, ov_fp32, reference,
                                                           mixed_texts):
    """``openvino: {precision: default}`` runs what the CPU plugin chooses when nothing
    pins it (bf16 on a CPU with native bf16, f32 on an AVX2-only one), the plan's flag-based
    prediction names the same, and the cache key differs from the pinned f32 one."""
    from evalq.core.host import host_facts, openvino_default

    variant = Variant(name="ov-default", backend="openvino",
                      openvino={"precision": "default"})
    encoder = build(variant, ov_ctx)
    try:
        vectors = encoder.embed(mixed_texts)
        described = encoder.describe()
    finally:
        encoder.close()
    assert described["inference_precision"] == openvino_default(host_facts())
    cosine = np.sum(vectors * reference, axis=1)
    assert cosine.min() > 0.99, cosine.min()  # bf16 arithmetic stays close, not exact
    if described["inference_precision"] != "f32":
        assert encoder.fingerprint() != ov_fp32.fingerprint()
