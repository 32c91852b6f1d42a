"""ONNX Runtime dynamic int8: MatMul weights int8 per channel, activations per batch.

The configurations are the ones users know from sentence-transformers'
``export_dynamic_quantized_onnx_model(..., "avx2" | "avx512" | "avx512_vnni" | "arm64")``,
which name optimum's per-ISA presets: unsigned 8-bit activations everywhere; unsigned
weights for AVX2 (its u8·u8 kernel has no saturation problem), signed weights for
AVX-512, AVX-512 VNNI and ARM64. No calibration: activation scales come from each batch
at run time, which is what makes a text's vector depend on its batch neighbours.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from evalq.engines.quantize.derive import DeriveContext, graph_method_load
from evalq.engines.quantize.onnx_graph import OnnxGraph, derived_graph
from evalq.engines.quantize.ort_nodes import (
    DYNAMIC_OPERATORS,
    check_operators,
    counted,
    nodes_to_quantize,
)

NAME = "ort-dynamic-int8"
SUMMARY = "ONNX Runtime dynamic int8 (per-channel weights, per-batch activations)"
BACKENDS = ("onnx",)
DEVICES = ("cpu",)
# Weight type per target ISA (activations are QUInt8 in all of them); reduce_range off.
WEIGHT_TYPES = {"avx2": "QUInt8", "avx512": "QInt8", "avx512_vnni": "QInt8", "arm64": "QInt8"}
Config = Literal["avx2", "avx512", "avx512_vnni", "arm64"]

load = graph_method_load(NAME, BACKENDS)


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # the x86 baseline by default: every x86-64 CPU evalq runs on has AVX2
    config: Config = "avx2"
    per_channel: bool = True
    operators: tuple[str, ...] = ("MatMul",)
    # weights: only MatMuls with a weight operand (the Linear layers); all: the
    # attention products of two activations too
    nodes: Literal["weights", "all"] = "weights"

    KNOWN_OPERATORS: ClassVar[tuple[str, ...]] = DYNAMIC_OPERATORS
    ALL_NODES_FIX: ClassVar[str] = ", or nodes: all to quantize every node of those types"

    def matmul_nodes_only(self) -> bool:
        """Whether evalq names the nodes (MatMuls) rather than leaving ONNX Runtime every
        node of ``operators`` (``nodes: all``)."""
        return self.nodes == "weights"

    @model_validator(mode="after")
    def _quantizes_as_written(self) -> Params:
        check_operators(self.operators, self.KNOWN_OPERATORS,
                        matmul_nodes_only=self.matmul_nodes_only(),
                        all_nodes_fix=self.ALL_NODES_FIX)
        return self


def derive(parent: OnnxGraph, params: Params, ctx: DeriveContext) -> OnnxGraph:
    def make(src: Path, out: Path) -> dict[str, Any]:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        weight_type = WEIGHT_TYPES[params.config]
        nodes = nodes_to_quantize(src, weights_only=True) if params.matmul_nodes_only() \
            else None
        with quantizer_logging():
            quantize_dynamic(str(src), str(out), op_types_to_quantize=list(params.operators),
                             per_channel=params.per_channel, reduce_range=False,
                             weight_type=getattr(QuantType, weight_type),
                             nodes_to_quantize=nodes)
        return {"bits": 8, "format": "QOperator", "activation_type": "QUInt8",
                "weight_type": weight_type, "reduce_range": False,
                # the MatMul nodes named to ONNX Runtime (None: every node of operators)
                "nodes_named": None if nodes is None else len(nodes)}

    graph = derived_graph(parent, ctx.cache_dir, NAME, params.model_dump(mode="json"), make)
    return counted(graph, NAME)


# ONNX Runtime's advice to run its ``quant_pre_process`` (symbolic shape inference and
# graph optimization) first. evalq quantizes its export as it is, and the gate judges the
# result; the advice names a script the user does not run, so it is dropped.
_PRE_PROCESS_ADVICE = ("consider to run pre-processing", "consider pre-processing")


class _QuantizerMessages(logging.Handler):
    """Writes the quantizer's root-logger messages to stderr (when nothing else would)."""

    def emit(self, record: logging.LogRecord) -> None:
        sys.stderr.write(f"onnxruntime.quantization: {record.levelname.lower()}: "
                         f"{record.getMessage()}\n")


def _not_advice(record: logging.LogRecord) -> bool:
    return not any(a in record.getMessage() for a in _PRE_PROCESS_ADVICE)


@contextmanager
def quantizer_logging() -> Iterator[None]:
    """ONNX Runtime's quantizer logs through the *root* logger with ``logging.warning``,
    which on a root without handlers calls ``basicConfig`` and leaves a stderr handler
    there for the rest of the process, so every library's root warnings print from then
    on. For the call's duration a filter on the root drops the pre-processing advice,
    and, when the root has no handler of its own (the user's or a test runner's, which
    then print the messages once), a handler keeps ``basicConfig`` from running."""
    root = logging.getLogger()
    handler = None if root.handlers else _QuantizerMessages(logging.WARNING)
    root.addFilter(_not_advice)
    if handler is not None:
        root.addHandler(handler)
    try:
        yield
    finally:
        root.removeFilter(_not_advice)
        if handler is not None:
            root.removeHandler(handler)
