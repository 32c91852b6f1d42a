"""Quantization methods on the real MiniLM: fidelity to float32 and bytes really held.

Cosine figures compare each candidate's embedding of a text with the float32 embedding of
the same text (both normalized). The thresholds come from measurements on this model
(see ENVIRONMENT.md): bitsandbytes int8 ~0.998, nf4 ~0.96, torch dynamic int8 clearly
lower than bitsandbytes int8 because its weight scale is per tensor.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from evalq.core.errors import InputError, MissingExtraError
from evalq.core.values import EncodingSettings
from evalq.engines.inprocess import InProcessEncoder
from evalq.engines.modelinfo import default_settings
from evalq.engines.quantize import METHODS, load_model, validate_quantization

VARIANTS: dict[str, dict] = {
    "fp32": {},
    "bf16": {"dtype": "bfloat16"},
    "bnb-int8": {"quantization": {"method": "bitsandbytes", "bits": 8}},
    "bnb-nf4": {"quantization": {"method": "bitsandbytes", "bits": 4, "type": "nf4"}},
    "dyn-int8": {"quantization": {"method": "torch-dynamic-int8"}},
}


class Measured:
    """Embeddings, quantization record and fingerprint of one variant."""

    def __init__(self, vectors: np.ndarray, weight_bytes: int, bits: int | None,
                 params: dict, fingerprint: str) -> None:
        self.vectors, self.weight_bytes, self.bits = vectors, weight_bytes, bits
        self.params, self.fingerprint = params, fingerprint


@pytest.fixture(scope="module")
def measured(minilm_path: Path, mixed_texts: list[str]) -> dict[str, Measured]:
    settings = default_settings(minilm_path)
    # Every other text (25, five of them past 256 tokens): LLM.int8 is slow on CPU.
    texts = sorted(mixed_texts[::2], key=len)
    out: dict[str, Measured] = {}
    for name, kwargs in VARIANTS.items():
        encoder = InProcessEncoder(minilm_path, settings=settings, **kwargs)
        try:
            vectors = np.concatenate([encoder.embed(texts[i:i + 16])
                                      for i in range(0, len(texts), 16)])
            record = encoder.record
            out[name] = Measured(vectors, record.weight_bytes or 0, record.bits, record.params,
                                 encoder.fingerprint())
        finally:
            encoder.close()
    return out


def cosines(measured: dict[str, Measured], name: str) -> np.ndarray:
    a, b = measured[name].vectors, measured["fp32"].vectors
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


# ------------------------------------------------------------------ fidelity


@pytest.mark.model
def test_bf16_is_close(measured: dict[str, Measured]) -> None:
    assert cosines(measured, "bf16").min() >= 0.999


@pytest.mark.model
def test_bnb_int8_cosine(measured: dict[str, Measured]) -> None:
    assert cosines(measured, "bnb-int8").min() >= 0.99


@pytest.mark.model
def test_bnb_nf4_lower_than_int8_but_usable(measured: dict[str, Measured]) -> None:
    nf4 = cosines(measured, "bnb-nf4")
    assert nf4.min() > 0.9
    assert nf4.mean() < cosines(measured, "bnb-int8").mean()


@pytest.mark.model
def test_dynamic_int8_measurably_worse_than_bnb_int8(measured: dict[str, Measured]) -> None:
    dyn, bnb8 = cosines(measured, "dyn-int8"), cosines(measured, "bnb-int8")
    assert dyn.mean() < bnb8.mean() - 0.01
    assert dyn.min() < 0.99  # a regression a gate at 0.99 catches


@pytest.mark.model
def test_vectors_are_float32_and_normalized(measured: dict[str, Measured]) -> None:
    for item in measured.values():
        assert item.vectors.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(item.vectors, axis=1), 1.0, atol=1e-5)


# ------------------------------------------------------------------ bytes and records


@pytest.mark.model
def test_weight_bytes_ordering(measured: dict[str, Measured]) -> None:
    """Measured on MiniLM: only Linear layers are quantized by bnb / torch.ao, and the
    float32 word-embedding table (30522 x 384, 47 MB) is half the model, so bf16 (which
    halves everything) holds fewer bytes than int8 or 4-bit Linear quantization."""
    b = {name: item.weight_bytes for name, item in measured.items()}
    id_buffers = 2 * 512 * 8  # position / token-type id buffers: int64, no cast touches them
    assert b["fp32"] == 22_713_216 * 4 + id_buffers  # MiniLM's 22.7M parameters, float32
    assert b["bf16"] == 22_713_216 * 2 + id_buffers
    assert b["fp32"] > b["bnb-int8"] > b["dyn-int8"] > b["bnb-nf4"] > b["bf16"]
    # Exact accounting of what replaces the float32 weights of the 37 nn.Linear layers:
    linear_weights, linear_rows, linears = 10_764_288, 21_120, 37
    # LLM.int8: 1 byte per weight + one float32 scale per output row (SCB)
    assert b["fp32"] - b["bnb-int8"] == linear_weights * 3 - linear_rows * 4
    # torch.ao: 1 byte per weight + a per-tensor scale and zero point (8 bytes each)
    assert b["fp32"] - b["dyn-int8"] == linear_weights * 3 - linears * 16
    # nf4: half a byte per weight + a float32 absmax per 64-weight block + a 16-entry code
    assert b["fp32"] - b["bnb-nf4"] == (linear_weights * 7 // 2 - linear_weights // 64 * 4
                                        - linears * 16 * 4)


@pytest.mark.model
def test_records_and_fingerprints(measured: dict[str, Measured]) -> None:
    assert [measured[n].bits for n in VARIANTS] == [32, 16, 8, 4, 8]
    assert measured["bnb-nf4"].params == {"bits": 4, "type": "nf4", "compute_dtype": "float32",
                                          "double_quant": False}
    assert measured["bnb-int8"].params == {"bits": 8, "int8_threshold": 6.0}
    assert len({item.fingerprint for item in measured.values()}) == len(VARIANTS)


@pytest.mark.model
def test_double_quant_and_fp4(minilm_path: Path, measured: dict[str, Measured]) -> None:
    """Double quantization stores the block scales in 8 bits: fewer bytes, counted."""
    settings = default_settings(minilm_path)
    texts = ["json.dumps serializes an object to a JSON formatted str.",
             "heapq.merge merges several sorted inputs into a single sorted output."]
    reference = InProcessEncoder(minilm_path, settings=settings)
    ref = reference.embed(texts)
    reference.close()
    for params in ({"bits": 4, "double_quant": True}, {"bits": 4, "type": "fp4"}):
        encoder = InProcessEncoder(minilm_path, settings=settings,
                                   quantization={"method": "bitsandbytes", **params})
        try:
            assert ((encoder.embed(texts) * ref).sum(1) > 0.85).all()
            if params.get("double_quant"):
                assert encoder.record.weight_bytes < measured["bnb-nf4"].weight_bytes
            else:
                assert encoder.record.params["type"] == "fp4"
        finally:
            encoder.close()


@pytest.mark.model
def test_same_method_spelled_two_ways_shares_a_fingerprint(minilm_path: Path) -> None:
    settings = default_settings(minilm_path)
    first = InProcessEncoder(minilm_path, settings=settings,
                             quantization={"method": "bitsandbytes", "bits": 4})
    second = InProcessEncoder(minilm_path, settings=settings,
                              quantization={"method": "bitsandbytes", "bits": 4, "type": "nf4",
                                            "compute_dtype": "float32"})
    try:
        assert first.fingerprint() == second.fingerprint()
    finally:
        first.close()
        second.close()


# ------------------------------------------------------------------ validation


def test_registry() -> None:
    assert set(METHODS) == {"dtype", "bitsandbytes", "torch-dynamic-int8", "w8a8-int8",
                            "ort-dynamic-int8", "ort-static-int8", "ort-optimize", "nncf-int8"}


@pytest.mark.parametrize(("method", "params", "field", "hint"), [
    ("gptq", {}, "quantization.method", "bitsandbytes"),
    ("bitsandbytes", {}, "quantization.bits", "bits: 8|4"),
    ("bitsandbytes", {"bits": 3}, "quantization.bits", "bits: 8|4"),
    ("bitsandbytes", {"bits": 8, "type": "nf4"}, "quantization.type", "nf4|fp4"),
    ("bitsandbytes", {"bits": 4, "type": "int4"}, "quantization.type", "nf4|fp4"),
    ("bitsandbytes", {"bits": 4, "colour": "red"}, "quantization.colour", "double_quant"),
    ("torch-dynamic-int8", {"bits": 8}, "quantization.bits", "no parameters"),
    ("dtype", {"dtype": "float8"}, "quantization.dtype", "bfloat16"),
])
def test_invalid_params_raise_input_error(method: str, params: dict, field: str,
                                          hint: str) -> None:
    with pytest.raises(InputError) as info:
        validate_quantization(method, params, file="recipe.yaml", line=12)
    assert info.value.field == field
    assert info.value.file == "recipe.yaml" and info.value.line == 12
    assert hint in (info.value.fix or "")


@pytest.mark.model
def test_invalid_combinations(minilm_path: Path) -> None:
    with pytest.raises(InputError, match="CPU only"):
        load_model(minilm_path, quantization={"method": "torch-dynamic-int8"}, device="cuda")
    with pytest.raises(InputError, match="float32"):
        load_model(minilm_path, dtype="bfloat16",
                   quantization={"method": "torch-dynamic-int8"})
    with pytest.raises(InputError, match="method"):
        load_model(minilm_path, quantization={"bits": 8})
    with pytest.raises(InputError, match="dtype"):
        InProcessEncoder(minilm_path, settings=EncodingSettings(), dtype="float64")


@pytest.mark.model
def test_missing_bitsandbytes_names_the_extra(minilm_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)  # makes `import bitsandbytes` fail
    with pytest.raises(MissingExtraError) as info:
        load_model(minilm_path, quantization={"method": "bitsandbytes", "bits": 8})
    assert "evalq[cpu]" in (info.value.fix or "")
