"""The numerics class is part of identity where numbers depend on it.

A cache made under one class is not served under another for int8 (and reduced
precision) engines; fp32 keys stay shared. Another class is simulated with oneDNN's
documented cap (``ONEDNN_MAX_CPU_ISA``), which is part of the key on every machine, so
these tests give the same answers on an AVX2-only and an AVX-512 CPU.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalq.core import host
from evalq.core.values import EncodingSettings, QuantizationRecord
from evalq.engines.graph_model import GraphModel
from evalq.engines.inprocess import InProcessEncoder
from evalq.engines.openvino_backend import OpenVinoModel, OpenVinoOptions
from evalq.engines.quantize.onnx_graph import OnnxGraph
from evalq.engines.reranker import CrossEncoderReranker, RerankSettings
from evalq.engines.vllm_engine import VllmEngineEncoder
from evalq.engines.vllm_rerank import VllmEngineReranker
from evalq.engines.vllm_rerank_server import VllmServerReranker
from evalq.engines.vllm_server import ServerLaunch, served_identity
from evalq.report.junit import host_properties, to_junit
from evalq.report.runview import class_warning
from evalq.results.hostpart import HostPart

INT8 = QuantizationRecord("ort-dynamic-int8", 8, 1000, {"per_channel": True})
FP32 = QuantizationRecord("none", 32, 4000)


class Graph(GraphModel):
    def identity(self) -> dict[str, Any]:
        return {"backend": "test-graph"}


def graph_model(record: QuantizationRecord, cls: type[GraphModel] = Graph) -> GraphModel:
    return cls(Path("model"), OnnxGraph(Path("g.onnx"), "abc123"),
               settings=EncodingSettings(), record=record, field_name="onnx.file")


def openvino_model(record: QuantizationRecord, precision: str) -> GraphModel:
    class Ov(OpenVinoModel, Graph):
        pass

    model = graph_model(record, Ov)
    model.dtype, model.precision, model.options = "float32", precision, OpenVinoOptions()
    return model


def torch_encoder(record: QuantizationRecord, device: str = "cpu") -> InProcessEncoder:
    """The in-process encoder's key without loading a model (only what the key reads)."""
    enc = object.__new__(InProcessEncoder)
    enc.record, enc.device, enc.dtype = record, device, "float32"
    enc.settings, enc._model_fingerprint = EncodingSettings(), "weights"
    return enc


def vllm_encoder(dtype: str, on_cpu: bool = True,
                 model: Path = Path("model")) -> VllmEngineEncoder:
    enc = object.__new__(VllmEngineEncoder)
    enc.dtype, enc.quantization, enc.on_cpu, enc.dimensions = dtype, None, on_cpu, None
    enc.settings, enc._model_fingerprint, enc.model_path = EncodingSettings(), "weights", model
    return enc


def checkpoint(folder: Path, quantized: bool) -> Path:
    """A model folder whose config.json declares a quantization (as evalq's W8A8
    compressed-tensors checkpoint does) or none; the weights fingerprint reads it too."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {"model_type": "bert"}
    if quantized:
        config["quantization_config"] = {"quant_method": "compressed-tensors"}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "model.safetensors").write_bytes(b"weights")
    return folder


class VllmServerKey:
    """The cache key of a vLLM server evalq starts (``served_identity``, which
    ``VllmServerEncoder`` hands its client), without starting one."""

    def __init__(self, model: Path, dtype: str, on_cpu: bool = True) -> None:
        self.model, self.launch, self.on_cpu = model, ServerLaunch(dtype=dtype), on_cpu

    def fingerprint(self) -> str:
        return served_identity(self.model, self.launch, on_cpu=self.on_cpu)


def vllm_server_reranker(dtype: str, model: Path, on_cpu: bool = True) -> VllmServerReranker:
    rr = object.__new__(VllmServerReranker)
    rr.kind, rr.dtype, rr.quantization, rr.on_cpu = "cross-encoder", dtype, None, on_cpu
    rr.settings, rr._model_fingerprint, rr.model_path = RerankSettings(), "weights", model
    return rr


def torch_reranker(record: QuantizationRecord, dtype: str = "float32") -> CrossEncoderReranker:
    """The in-process cross-encoder's score-cache key without loading a model."""
    rr = object.__new__(CrossEncoderReranker)
    rr.record, rr.device, rr.dtype = record, "cpu", dtype
    rr.settings, rr._model_fingerprint = RerankSettings(), "weights"
    return rr


def vllm_reranker(dtype: str, on_cpu: bool = True) -> VllmEngineReranker:
    rr = object.__new__(VllmEngineReranker)
    rr.kind, rr.dtype, rr.quantization, rr.on_cpu = "cross-encoder", dtype, None, on_cpu
    rr.settings, rr._model_fingerprint, rr.model_path = RerankSettings(), "weights", Path("m")
    return rr


def keys_under_two_classes(monkeypatch: pytest.MonkeyPatch, key: Any) -> tuple[str, str]:
    for name in host.CAPS:
        monkeypatch.delenv(name, raising=False)
    first = key()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "SSE41")
    return first, key()


@pytest.mark.parametrize(("make", "isa_dependent"), [
    (lambda: graph_model(INT8), True),
    (lambda: graph_model(FP32), False),
    (lambda: openvino_model(INT8, "f32"), True),
    (lambda: openvino_model(FP32, "f32"), False),
    (lambda: openvino_model(FP32, "bf16"), True),  # the engine's default on a BF16 CPU
    (lambda: torch_encoder(QuantizationRecord("torch-dynamic-int8", 8, 10)), True),
    (lambda: torch_encoder(FP32), False),
    # what load_model records for a plain fp32 model: the dtype method at float32
    (lambda: torch_encoder(QuantizationRecord("dtype", 32, 10, {"dtype": "float32"})), False),
    (lambda: torch_encoder(QuantizationRecord("bitsandbytes", 8, 10), "cuda"), False),
    (lambda: vllm_encoder("bfloat16"), True),  # vLLM's CPU kernels in bf16
    (lambda: vllm_encoder("float32"), False),
    (lambda: vllm_encoder("bfloat16", on_cpu=False), False),  # a GPU: not a CPU class
    # rerankers' score caches follow the same rule
    (lambda: torch_reranker(QuantizationRecord("torch-dynamic-int8", 8, 10)), True),
    (lambda: torch_reranker(QuantizationRecord("dtype", 32, 10, {"dtype": "float32"})),
     False),
    (lambda: torch_reranker(QuantizationRecord("dtype", 16, 10, {"dtype": "bfloat16"}),
                            "bfloat16"), True),
    (lambda: vllm_reranker("bfloat16"), True),
    (lambda: vllm_reranker("float32"), False),
    (lambda: vllm_reranker("bfloat16", on_cpu=False), False),
])
def test_another_numerics_class_changes_int8_keys_and_not_fp32_keys(
        monkeypatch: pytest.MonkeyPatch, make: Any, isa_dependent: bool) -> None:
    model = make()
    before, after = keys_under_two_classes(monkeypatch, model.fingerprint)
    assert (before != after) is isa_dependent


@pytest.mark.parametrize(("make", "isa_dependent"), [
    # a vLLM server evalq starts on this host keys its vectors as the engine does
    (lambda m: VllmServerKey(checkpoint(m, False), "bfloat16"), True),
    (lambda m: VllmServerKey(checkpoint(m, False), "float32"), False),
    (lambda m: VllmServerKey(checkpoint(m, True), "float32"), True),  # W8A8 checkpoint
    (lambda m: VllmServerKey(checkpoint(m, True), "float32", on_cpu=False), False),
    (lambda m: vllm_encoder("float32", model=checkpoint(m, True)), True),
    (lambda m: vllm_server_reranker("bfloat16", checkpoint(m, False)), True),
    (lambda m: vllm_server_reranker("float32", checkpoint(m, False)), False),
    (lambda m: vllm_server_reranker("float32", checkpoint(m, True)), True),
    (lambda m: vllm_server_reranker("bfloat16", checkpoint(m, False), on_cpu=False),
     False),
])
def test_vllm_servers_and_quantized_checkpoints_key_by_class_below_fp32(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, make: Any,
        isa_dependent: bool) -> None:
    model = make(tmp_path / "model")
    before, after = keys_under_two_classes(monkeypatch, model.fingerprint)
    assert (before != after) is isa_dependent


def test_the_class_is_named_in_the_key_not_only_the_caps(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = graph_model(INT8)
    for name in host.CAPS:
        monkeypatch.delenv(name, raising=False)
    real = model.fingerprint()
    monkeypatch.setattr(host, "current_class", lambda: "x86-64/some-other-class")
    assert model.fingerprint() != real


def test_class_warning_names_each_folders_class() -> None:
    assert class_warning({"A": "x86-64/avx2", "B": "x86-64/avx2"}) is None
    text = class_warning({"A": "x86-64/avx2", "B": "x86-64/avx512-vnni"})
    assert text is not None and "A on x86-64/avx2" in text
    assert "B on x86-64/avx512-vnni" in text
    old = class_warning({"A": None, "B": "arm64/neon"})
    assert old is not None and "A on an unrecorded class" in old


def test_junit_carries_the_host_as_suite_properties() -> None:
    facts = HostPart.model_validate(
        {**host.host_facts().as_dict(), "isa_caps": {"ONEDNN_MAX_CPU_ISA": "AVX2"}})
    props = host_properties(facts)
    assert props["evalq.host.numerics_class"] == facts.numerics_class
    assert props["evalq.host.isa_caps.ONEDNN_MAX_CPU_ISA"] == "AVX2"
    xml = to_junit({}, host=facts)
    assert f'name="evalq.host.numerics_class" value="{facts.numerics_class}"' in xml
    assert "<properties>" not in to_junit({})  # an old folder: no host, no properties
