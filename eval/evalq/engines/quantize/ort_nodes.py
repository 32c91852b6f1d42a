"""Which nodes an ONNX Runtime int8 method quantizes, checked against what its options say,
and what it did quantize, counted from the graph it wrote.

ONNX Runtime's quantizers read two options in ways that invert a recipe's words: an empty
``nodes_to_quantize`` means *every* node (so ``skip: ['.*']``, "keep every MatMul float",
quantized every MatMul), and an empty ``op_types_to_quantize`` means its default operator
set; an operator it does not know is silently left float (``operators: [NoSuchOp]`` wrote
an fp32 graph recorded as "bits 8"). evalq hands it MatMul node names (those with a weight
operand, or every MatMul with ``nodes: all`` in static mode), so any other operator in the
list would quantize nothing either. The options are refused when the recipe is read where
their words alone decide it; the node list is checked on the graph before quantizing, and
the written graph's int8 weights are counted into the record, so a method that quantized
nothing cannot be recorded as int8.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from evalq.core.errors import InputError
from evalq.engines.quantize.derive import option_error, option_refusal
from evalq.engines.quantize.onnx_graph import OnnxGraph, weight_matmuls

# The operators ONNX Runtime's quantizers know (onnxruntime.quantization.registry:
# IntegerOpsRegistry for dynamic QOperator, QDQRegistry for static QDQ;
# tests/engines/test_quantize.py holds these to the installed version). Spelled as ONNX
# spells them: case matters.
DYNAMIC_OPERATORS = ("Attention", "Conv", "EmbedLayerNormalization", "Gather", "LSTM",
                     "MatMul", "Transpose")
STATIC_OPERATORS = ("AveragePool", "BatchNormalization", "Clip", "Conv", "ConvTranspose",
                    "CumSum", "Flatten", "Gather", "GatherElements", "Gemm",
                    "InstanceNormalization", "LayerNormalization", "MatMul", "MaxPool", "Pad",
                    "Relu", "Reshape", "Resize", "Slice", "Split", "Squeeze", "TopK",
                    "Transpose", "Unsqueeze", "Where")
# Node names of the kind exported graphs carry; a skip pattern that matches all of them
# matches every node of any graph.
_PROBE_NAMES = ("/encoder/layer.0/attention/self/query/MatMul",
                "/encoder/layer.11/output/dense/MatMul", "/pooler/dense/MatMul",
                "onnx::MatMul_1234", "node_7", "x")


def check_operators(operators: Sequence[str], known: Sequence[str], *,
                    matmul_nodes_only: bool, all_nodes_fix: str) -> None:
    """Refuse an operator list ONNX Runtime would not honour as written.
    ``matmul_nodes_only``: evalq names MatMul nodes to it, so no other type is reached;
    ``all_nodes_fix`` is the way out of that, if the method has one ('' if not)."""
    ops = list(operators)
    if not ops:
        raise option_error(
            "operators", ops, "an empty operator list does not quantize nothing: ONNX "
            "Runtime reads it as its default operator set",
            "name the operators to quantize (the default is [MatMul]), or leave "
            "quantization out for a float graph")
    unknown = [op for op in ops if op not in known]
    if unknown:
        raise option_error(
            "operators", ops, f"ONNX Runtime's quantizer knows no operator "
            f"{', '.join(map(repr, unknown))}: its nodes would stay float while the record "
            "says int8", f"use operators among {', '.join(known)} (case matters), e.g. "
            "[MatMul]")
    others = [op for op in ops if op != "MatMul"]
    if matmul_nodes_only and others:
        what = ("quantize nothing" if "MatMul" not in ops
                else f"leave {', '.join(others)} float")
        raise option_error(
            "operators", ops, f"operators {ops} would {what}: evalq hands ONNX Runtime "
            "only MatMul nodes to quantize", f"use operators: [MatMul]{all_nodes_fix}")


def check_skip(patterns: Sequence[str]) -> tuple[str, ...]:
    """Each ``skip`` pattern compiles and does not match every node name (which would
    leave ONNX Runtime an empty node list, read as 'quantize all')."""
    for i, pattern in enumerate(patterns):
        try:
            compiled = re.compile(pattern)
        except re.error as exc:
            raise option_refusal(
                f"skip[{i}] {pattern!r} is not a regular "
                f"expression: {exc}", "write a Python regular expression over node names, "
                r"e.g. 'layer\.\d+/output/dense/'") from None
        if all(compiled.search(name) for name in _PROBE_NAMES):
            raise option_refusal(
                f"skip[{i}] {pattern!r} matches every node name, "
                "so no MatMul is left to quantize, and ONNX Runtime reads that empty node "
                "list as 'quantize every node'", "narrow the pattern to the nodes to keep "
                "float, or leave quantization out for a float graph")
    return tuple(patterns)


def nodes_to_quantize(graph: Path, *, weights_only: bool, skip: tuple[str, ...] = ()
                      ) -> list[str]:
    """The MatMul nodes of ``graph`` to hand ONNX Runtime; never empty (it would read an
    empty list as every node)."""
    nodes = weight_matmuls(graph, weights_only=weights_only, skip=skip)
    if nodes:
        return nodes
    if skip and weight_matmuls(graph, weights_only=weights_only):
        raise InputError(
            message=f"quantization skip {list(skip)} matches every MatMul of '{graph}': "
            "nothing is left to quantize, and ONNX Runtime reads an empty node list as "
            "'quantize every node'", field="quantization.skip",
            fix="narrow the patterns to the nodes to keep float, or leave quantization out")
    raise InputError(
        message=f"'{graph}' has no MatMul with a weight operand for int8 quantization",
        file=graph, field="quantization.nodes",
        fix="use nodes: all to quantize the activation products, or leave quantization out")


def _tensor_bytes(tensor: Any) -> int:
    from onnx import helper

    count = 1
    for dim in tensor.dims:
        count *= int(dim)
    return count * helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize


def quantized_weights(path: Path) -> dict[str, int]:
    """What a written graph holds: weight matrices (initializers of rank >= 2) stored in
    8 bits, and float ones a MatMul still reads directly, with their bytes."""
    import onnx
    from onnx import TensorProto

    graph = onnx.load(str(path), load_external_data=False).graph
    matmul_inputs = {name for n in graph.node if n.op_type == "MatMul" for name in n.input}
    eight_bit = (TensorProto.INT8, TensorProto.UINT8)
    floats = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16)
    counts = {"int8_weights": 0, "int8_bytes": 0, "float_matmul_weights": 0,
              "float_matmul_bytes": 0}
    for tensor in graph.initializer:
        if len(tensor.dims) < 2:
            continue  # scales, zero points, biases
        if tensor.data_type in eight_bit:
            counts["int8_weights"] += 1
            counts["int8_bytes"] += _tensor_bytes(tensor)
        elif tensor.data_type in floats and tensor.name in matmul_inputs:
            counts["float_matmul_weights"] += 1
            counts["float_matmul_bytes"] += _tensor_bytes(tensor)
    return counts


def counted(graph: OnnxGraph, method: str) -> OnnxGraph:
    """``graph`` with what was quantized in its record (``info['quantized']``); a graph in
    which nothing was quantized is refused rather than recorded as int8."""
    counts = quantized_weights(graph.path)
    if counts["int8_weights"] == 0:
        raise InputError(
            message=f"quantization method '{method}' quantized no weight of '{graph.path}': "
            "the graph is float, and the record would say int8",
            field="quantization.operators",
            fix="quantize MatMul (operators: [MatMul], the default) and keep skip from "
            "covering every MatMul")
    return replace(graph, info={**graph.info, "quantized": counts})


__all__ = ["DYNAMIC_OPERATORS", "STATIC_OPERATORS", "check_operators", "check_skip", "counted",
           "nodes_to_quantize", "quantized_weights"]
