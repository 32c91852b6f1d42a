"""Batch-composition declarations, each checked against the real encoder, and the cache
keeping batch compositions of batch-dependent encoders apart.

Every check encodes the same real texts (stdlib docstrings, short to far past MiniLM's
256 tokens) in two compositions: length-sorted batches of at most 512 padded tokens, and
a seeded random order in batches of up to 8192. A declaration that is wrong fails here:
bit-identical must be equal, near-invariant must stay within its tolerance, dependent
must move by far more than that (and repeat exactly in the same composition, so the
movement is the composition's, not noise).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from evalq.encode.batching import chunk_key, encode_texts, pack_batches
from evalq.encode.cache import EmbeddingCache
from evalq.encode.composition import (
    NEAR_INVARIANT_TOLERANCE,
    BatchDependence,
    cache_composition,
    declared_dependence,
)
from evalq.engines.quantize import METHODS
from evalq.engines.registry import BACKENDS
from evalq.recipe.schema import Variant
from support.vllm_settings import w8a8_dtype

# One variant per registered quantization method and backend (a new method or backend
# must add its case here, or test_every_method_and_backend_is_declared fails).
CASES = {
    "fp32": Variant(name="fp32"),
    "bf16": Variant(name="bf16", dtype="bfloat16"),
    "dtype-fp16": Variant(name="f", quantization={"method": "dtype", "dtype": "float16"}),
    "bnb-int8": Variant(name="b8", quantization={"method": "bitsandbytes", "bits": 8}),
    "bnb-nf4": Variant(name="nf4", quantization={"method": "bitsandbytes", "bits": 4,
                                                 "type": "nf4"}),
    "bnb-fp4": Variant(name="fp4", quantization={"method": "bitsandbytes", "bits": 4,
                                                 "type": "fp4"}),
    "dyn-int8": Variant(name="d", quantization={"method": "torch-dynamic-int8"}),
    "vllm-fp32": Variant(name="v", backend="vllm"),
    "vllm-w8a8": Variant(name="w", backend="vllm", quantization={"method": "w8a8-int8"}),
    "vllm-fp8": Variant(name="v8", backend="vllm", vllm={"quantization": "fp8"}),
    "openai": Variant(name="o", backend="openai", http={"url": "http://127.0.0.1:1"}),
    "tei": Variant(name="t", backend="tei", http={"url": "http://127.0.0.1:1"}),
    "onnx-fp32": Variant(name="x", backend="onnx"),
    "ort-dyn": Variant(name="xd", backend="onnx", quantization={"method": "ort-dynamic-int8"}),
    "ort-static": Variant(name="xs", backend="onnx",
                          quantization={"method": "ort-static-int8"}),
    "ort-opt": Variant(name="xo", backend="onnx", quantization={"method": "ort-optimize"}),
    "ov-fp32": Variant(name="ov", backend="openvino"),
    "ov-fp16": Variant(name="ov16", backend="openvino", dtype="float16"),
    "ov-int8": Variant(name="ov8", backend="openvino", quantization={"method": "nncf-int8"}),
}

EXPECTED = {
    "fp32": "near-invariant", "bf16": "near-invariant", "dtype-fp16": "near-invariant",
    "bnb-int8": "dependent", "bnb-nf4": "near-invariant", "bnb-fp4": "near-invariant",
    "dyn-int8": "dependent", "vllm-fp32": "near-invariant", "vllm-w8a8": "near-invariant",
    "vllm-fp8": "unverified", "openai": "unverified", "tei": "unverified",
    "onnx-fp32": "near-invariant", "ort-dyn": "dependent", "ort-static": "near-invariant",
    "ort-opt": "near-invariant", "ov-fp32": "near-invariant", "ov-fp16": "near-invariant",
    "ov-int8": "near-invariant",
}


def test_every_method_and_backend_is_declared():
    methods = {(v.quantization or {}).get("method") for v in CASES.values()}
    assert set(METHODS) <= methods, f"no declaration case for {set(METHODS) - methods}"
    assert set(BACKENDS.names("embedding")) <= {v.backend for v in CASES.values()}
    for name, variant in CASES.items():
        declared = declared_dependence(variant)
        assert declared.level == EXPECTED[name], name
        assert not declared.reason.startswith("no declaration"), name
        # Dependent and unverified encoders key their cache by batching; the rest share.
        assert (cache_composition(variant) is None) == (not declared.batch_dependent), name


def _two_compositions(encoder, texts, *, length_sorted=True):
    first = encode_texts(encoder, texts, role="document", batch_tokens=512, max_batch=256,
                         progress=False, length_sorted=length_sorted).vectors
    second = encode_texts(encoder, texts, role="document", batch_tokens=8192, max_batch=256,
                          progress=False, length_sorted=length_sorted, shuffle_seed=0).vectors
    return first, second


def assert_declaration_holds(declared: BatchDependence, first, second, again=None):
    diff = float(np.max(np.abs(first - second)))
    if declared.level == "bit-identical":
        assert np.array_equal(first, second), f"declared bit-identical, differs by {diff:.3g}"
    elif declared.level == "near-invariant":
        assert declared.tolerance is not None
        assert diff <= declared.tolerance, (
            f"declared near-invariant within {declared.tolerance}, differs by {diff:.3g}")
    elif declared.level == "dependent":
        assert diff > 100 * NEAR_INVARIANT_TOLERANCE, (
            f"declared batch-dependent, but two compositions differ by only {diff:.3g}")
        assert again is not None and np.array_equal(first, again), (
            "the same composition twice must repeat exactly, or the difference is noise")
    else:
        pytest.fail(f"level {declared.level} is not verifiable here")


@pytest.fixture(scope="module")
def texts(mixed_texts):
    # 24 texts from a few tokens to truncated: enough to form several batches at 512.
    return mixed_texts[::3] + mixed_texts[-4:]


@pytest.mark.model
@pytest.mark.parametrize("case", ["fp32", "bf16", "bnb-int8", "bnb-nf4", "bnb-fp4",
                                  "dyn-int8"])
def test_inprocess_declaration_holds(case, minilm_path, minilm_settings, texts):
    from evalq.engines.inprocess import InProcessEncoder

    variant = CASES[case]
    encoder = InProcessEncoder(minilm_path, settings=minilm_settings, dtype=variant.dtype,
                               quantization=variant.quantization)
    try:
        first, second = _two_compositions(encoder, texts)
        again = None
        if declared_dependence(variant).level == "dependent":
            again = _two_compositions(encoder, texts)[0]
    finally:
        encoder.close()
    assert_declaration_holds(declared_dependence(variant), first, second, again)


@pytest.mark.model
@pytest.mark.parametrize("case", ["onnx-fp32", "ort-dyn", "ort-static", "ort-opt", "ov-fp32",
                                  "ov-fp16", "ov-int8"])
def test_graph_backend_declaration_holds(case, minilm_path, minilm_settings, texts,
                                         tmp_path_factory):
    from evalq.engines.context import BuildContext
    from evalq.engines.factory import create_encoder

    cache = tmp_path_factory.getbasetemp() / "composition-onnx"
    pairs = [(f"d{i}", t) for i, t in enumerate(texts)]
    ctx = BuildContext(minilm_path, minilm_settings, cache / "logs", "cpu", cache,
                       calibration=lambda n, seed: pairs[:n])
    variant = CASES[case]
    encoder = create_encoder(variant, ctx)
    try:
        first, second = _two_compositions(encoder, texts)
        again = None
        if declared_dependence(variant).level == "dependent":
            again = _two_compositions(encoder, texts)[0]
    finally:
        encoder.close()
    assert_declaration_holds(declared_dependence(variant), first, second, again)


# W8A8 before fp32: the float32 engine the fp32 test starts is the one the parity and
# engine tests reuse next.
@pytest.mark.process
@pytest.mark.vllm
def test_vllm_w8a8_declaration_holds(vllm_engine_pool, minilm_w8a8, texts):
    from evalq.engines.modelinfo import default_settings

    checkpoint = minilm_w8a8
    engine = vllm_engine_pool.get(checkpoint.path, default_settings(checkpoint.path),
                                  dtype=w8a8_dtype())  # bfloat16 on an AMX CPU
    try:
        first, second = _two_compositions(engine, texts, length_sorted=False)
    finally:
        vllm_engine_pool.close()
    assert_declaration_holds(declared_dependence(CASES["vllm-w8a8"]), first, second)


@pytest.mark.vllm
def test_vllm_fp32_declaration_holds(vllm_engine, texts):
    first, second = _two_compositions(vllm_engine, texts, length_sorted=False)
    assert_declaration_holds(declared_dependence(CASES["vllm-fp32"]), first, second)


# ----------------------------------------------------------------------- cache separation

def test_invariant_keys_are_unchanged_and_composition_keys_differ():
    base = chunk_key("enc", "set", "document", "", ["a", "b"])
    assert chunk_key("enc", "set", "document", "", ["a", "b"], None) == base
    one = chunk_key("enc", "set", "document", "", ["a", "b"], {"batch_tokens": 512})
    two = chunk_key("enc", "set", "document", "", ["a", "b"], {"batch_tokens": 8192})
    assert len({base, one, two}) == 3


def test_pack_batches_keeps_the_padded_budget_in_any_order():
    rng = np.random.default_rng(0)
    for _ in range(200):
        lengths = rng.integers(1, 300, size=int(rng.integers(1, 60))).tolist()
        budget, cap = int(rng.integers(16, 4000)), int(rng.integers(1, 40))
        batches = pack_batches(lengths, batch_tokens=budget, max_batch=cap)
        assert batches[0][0] == 0 and batches[-1][1] == len(lengths)
        assert all(a[1] == b[0] for a, b in itertools.pairwise(batches))
        for start, stop in batches:
            assert stop - start <= cap
            assert stop - start == 1 or (stop - start) * max(lengths[start:stop]) <= budget
    # Sorted longest-first input packs exactly as before: budget // longest per batch.
    assert pack_batches([100, 90, 50, 50, 10], batch_tokens=250, max_batch=8) == [
        (0, 2), (2, 5)]


@pytest.mark.model
def test_cache_recomputes_dependent_variant_under_other_batching(
        minilm_path, minilm_settings, texts, tmp_path):
    from evalq.engines.inprocess import InProcessEncoder

    cache = EmbeddingCache(tmp_path / "cache")
    dyn, fp32 = CASES["dyn-int8"], CASES["fp32"]
    encoder = InProcessEncoder(minilm_path, settings=minilm_settings,
                               quantization=dyn.quantization)
    try:
        def run(tokens, variant=dyn):
            return encode_texts(encoder, texts, role="document", batch_tokens=tokens,
                                cache=cache, progress=False, chunk_size=8,
                                composition=cache_composition(variant))

        at_512 = run(512)
        assert at_512.stats.chunks_cached == 0
        assert run(512).stats.chunks_computed == 0  # same batching: all from the cache
        at_8192 = run(8192)
        assert at_8192.stats.chunks_cached == 0  # other batching: recomputed, not reused
        assert not np.array_equal(at_512.vectors, at_8192.vectors)
        # An invariant variant keys without the batching: other budgets share its chunks.
        # (Same encoder object, so only the key rule differs here.)
        run(512, fp32)
        assert run(8192, fp32).stats.chunks_computed == 0
    finally:
        encoder.close()
