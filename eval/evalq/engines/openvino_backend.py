"""The ``openvino`` embedding backend: OpenVINO's CPU plugin, in-process.

The IR is converted from evalq's ONNX export of the recipe's checkpoint
(``quantize/openvino_ir.py``), or is a user's ``openvino_model.xml``
(``openvino: {file: ...}``). ``dtype: float16`` stores float16 weights
(``compress_to_fp16``); the CPU plugin computes in the precision its hint names, which
the manifest records (float32 on a CPU without native float16 arithmetic). ``nncf-int8``
derives an int8 IR calibrated on corpus texts. Tokenization, pooling and normalization
are ``textfront``'s, as in-process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.errors import InputError
from evalq.core.host import host_facts, openvino_default
from evalq.core.protocols import Encoder
from evalq.core.values import EncodingSettings, QuantizationRecord
from evalq.engines.context import BuildContext
from evalq.engines.graph_encoder import GraphEncoder, declared_dependence
from evalq.engines.graph_model import GraphModel
from evalq.engines.graph_variant import ir_bytes, variant_graph
from evalq.engines.inprocess import PADDED_FLOAT
from evalq.engines.options import EncoderVariant, OpenVinoOptions
from evalq.engines.quantize import nncf_int8
from evalq.engines.quantize.derive import DeriveContext
from evalq.engines.quantize.onnx_graph import (
    TOKEN_INPUTS,
    TOKEN_STATES,
    GraphHead,
    OnnxGraph,
    export_onnx,
    require,
    user_graph,
    versions,
)
from evalq.engines.quantize.openvino_ir import EXTRA, convert_ir, read_ir
from evalq.engines.spec import NEAR_INVARIANT_TOLERANCE, BackendSpec, BatchDependence
from evalq.engines.textfront import TokenizerFront

BACKEND_NAME = "openvino"




class OpenVinoModel(GraphModel):
    """The OpenVINO half of the openvino encoder and reranker: the compiled model, its
    cache-key part and description, the run and close. Listed before ``GraphEncoder`` /
    ``GraphReranker`` in a backend class, it fills in ``GraphModel``'s runtime half."""

    dtype: str
    options: OpenVinoOptions
    precision: str
    _compiled: Any

    def _compile(self, ov: Any, graph: OnnxGraph, width: int, dtype: str,
                 options: OpenVinoOptions | None, field_name: str,
                 head: GraphHead = TOKEN_STATES) -> None:
        self.dtype = dtype
        self.options = options or OpenVinoOptions()
        self._compiled, self._inputs, self.precision = compile_cpu(
            ov, graph.path, width, self.options, field_name=field_name, head=head)

    def isa_dependent(self) -> bool:
        """Int8 graphs, and any precision below f32 (bf16 where the CPU has it)."""
        return super().isa_dependent() or self.precision not in ("f32", "float32")

    def fingerprint(self) -> str:
        """Cache key: the shared part, dtype, inference precision, OpenVINO's version."""
        return self._key(dtype=self.dtype, precision=self.precision,
                         versions=versions("openvino"))

    def describe(self) -> dict[str, Any]:
        return self._description(
            dtype=self.dtype, inference_precision=self.precision,
            threads=self.options.threads,
            versions=versions("openvino", "nncf", "transformers"))

    def _run(self, feed: dict[str, np.ndarray]) -> Any:
        return self._compiled(feed)[0]

    def _ready(self) -> bool:
        return self._compiled is not None

    def close(self) -> None:
        self._compiled = None


class OpenVinoEncoder(OpenVinoModel, GraphEncoder):
    """Encoder protocol on a compiled OpenVINO model (CPU plugin)."""

    backend_name = BACKEND_NAME

    def __init__(self, model_path: str | Path, graph: OnnxGraph, *,
                 settings: EncodingSettings, record: QuantizationRecord, dtype: str,
                 options: OpenVinoOptions | None = None,
                 field_name: str = "openvino.file",
                 front: TokenizerFront | None = None) -> None:
        ov = require("openvino", EXTRA, "the openvino backend")
        super().__init__(model_path, graph, settings=settings, record=record,
                         field_name=field_name, front=front)
        self._compile(ov, graph, self.dim, dtype, options, field_name)


def graph_for(variant: EncoderVariant, ctx: BuildContext, front: TokenizerFront,
              ) -> tuple[OnnxGraph, QuantizationRecord]:
    """The IR a variant runs and the record of what was done to it."""
    fp16 = variant.dtype == "float16"
    graph = base_ir(getattr(variant, BACKEND_NAME, None), ctx.model_path, ctx.cache_dir,
                    fp16=fp16)
    return variant_graph(graph, variant.quantization, BACKEND_NAME, lambda: DeriveContext(
        ctx.cache_dir / "checkpoints", front, ctx.calibration, ctx.model_path,
        ctx.known_draws), ir_bytes,
        unquantized=("dtype", 16) if fp16 else ("none", 32))


def base_ir(options: OpenVinoOptions | None, model_path: Path, cache_dir: Path, *,
            fp16: bool, head: GraphHead = TOKEN_STATES,
            field_name: str = "openvino.file") -> OnnxGraph:
    """The variant's IR before quantization: the user's file when given, else the
    OpenVINO conversion of evalq's ONNX export of ``head``."""
    if options is not None and options.file:
        return user_graph(options.file, field_name=field_name, kind="OpenVINO",
                          siblings=(".bin",), libraries=("openvino",))
    require("openvino", EXTRA, "the openvino backend")
    cache = cache_dir / "checkpoints"
    return convert_ir(export_onnx(model_path, cache, head), cache, fp16=fp16)


def compile_cpu(ov: Any, path: Path, width: int, options: OpenVinoOptions, *,
                field_name: str, head: GraphHead = TOKEN_STATES,
                ) -> tuple[Any, list[str], str]:
    """The IR at ``path`` compiled for the CPU plugin in float32, or in the plugin's own
    default precision (``precision: default``), its first output checked against
    ``head`` and ``width``: the compiled model, the token inputs it takes, and the
    inference precision the plugin reports."""
    core = ov.Core()
    model = read_ir(core, path, width, field_name=field_name, head=head)
    inputs = [n for n in TOKEN_INPUTS if any(n in i.get_names() for i in model.inputs)]
    # The default is the plugin's own, except where a oneDNN cap emulates a CPU without
    # bf16: there the class's default (f32) is pinned, see core.host.openvino_default.
    pinned = options.precision == "f32" or openvino_default(host_facts()) == "f32"
    config: dict[str, Any] = {"INFERENCE_PRECISION_HINT": "f32"} if pinned else {}
    if options.threads is not None:
        config["INFERENCE_NUM_THREADS"] = options.threads
    try:
        compiled = core.compile_model(model, "CPU", config)
    except Exception as exc:  # an operation the CPU plugin has no implementation for
        raise InputError(message=f"OpenVINO's CPU plugin cannot compile '{path}': "
                         f"{str(exc)[:300]}", file=path, field=field_name,
                         fix="use operations the CPU plugin supports, or let evalq "
                         "convert the model") from None
    hint = compiled.get_property("INFERENCE_PRECISION_HINT")
    return compiled, inputs, hint.to_string() if hasattr(hint, "to_string") else str(hint)


def build(variant: EncoderVariant, ctx: BuildContext) -> Encoder:
    if variant.device == "cuda":
        raise InputError(message="backend openvino runs OpenVINO's CPU plugin", field="device",
                         fix="use device: cpu (or auto) for this variant")
    front = TokenizerFront(ctx.model_path, ctx.settings, ctx.tokenizer)
    graph, record = graph_for(variant, ctx, front)
    return OpenVinoEncoder(ctx.model_path, graph, settings=ctx.settings, record=record,
                           dtype=variant.dtype, options=getattr(variant, BACKEND_NAME, None),
                           front=front)


# Batch dependence of what this backend runs; checked by tests/encode/test_composition.py.
DECLARED = {
    nncf_int8.NAME: BatchDependence(
        "near-invariant",
        "FakeQuantize ranges fixed at calibration and masked attention: neighbours change "
        "only padding (measured 0 between the compositions of "
        "tests/encode/test_composition.py; the tolerance leaves room for a rounding that "
        "crosses one quantization step)", 1e-2),
}
FP16_WEIGHTS = BatchDependence(
    "near-invariant", "float16 weights computed in float32, masked attention: neighbours "
    "only change padding", NEAR_INVARIANT_TOLERANCE)


ENGINE_DEFAULT = BatchDependence(
    "near-invariant", "the plugin's default precision (bf16 where the CPU has it): "
    "masked attention, neighbours change only padding, but a differently shaped matmul "
    "rounds its bf16 inputs' products in another order", 1e-2)


def batch_dependence(variant: EncoderVariant) -> BatchDependence:
    options = getattr(variant, BACKEND_NAME, None)
    unquantized = (ENGINE_DEFAULT if options is not None and options.precision == "default"
                   else PADDED_FLOAT if variant.dtype == "float32" else FP16_WEIGHTS)
    return declared_dependence(BACKEND_NAME, (variant.quantization or {}).get("method"),
                               DECLARED, unquantized)


SPEC = BackendSpec(BACKEND_NAME, "embedding", "in-process", build, quantized_by="evalq",
                   options_key=BACKEND_NAME, options_model=OpenVinoOptions,
                   devices=("cpu",), dtypes=("float32", "float16"),
                   batch_dependence=batch_dependence,
                   cache_key="chunks keyed by the IR's content (weights fingerprint, export "
                   "and conversion, or the user file's hash), dtype, quantization, "
                   "OpenVINO version, numerics class (int8, bf16), settings, texts")

__all__ = ["BACKEND_NAME", "SPEC", "OpenVinoEncoder", "OpenVinoModel", "OpenVinoOptions",
           "base_ir", "build", "compile_cpu", "graph_for"]
