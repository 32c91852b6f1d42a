"""The graph a variant of a graph backend runs: its base graph, or one its method derives.

The ONNX Runtime and OpenVINO backends, for embedding models and for cross-encoders
alike, start from a base graph (evalq's export, its OpenVINO conversion, or a user's
file) and hand it to the variant's quantization method when it has one; the method must
be one whose ``backends`` name this backend. The record of what was done (method, bits,
weight bytes, the method's parameters and the graph's own record) is made here once, so
every graph backend writes the same manifest fields.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from evalq.core.errors import InputError
from evalq.core.values import QuantizationRecord
from evalq.engines.quantize import METHODS, validate_quantization
from evalq.engines.quantize.derive import DeriveContext
from evalq.engines.quantize.onnx_graph import OnnxGraph


def methods_for(backend: str) -> list[str]:
    """The quantization methods ``backend`` applies (the registry's declarations)."""
    return [m for m, s in METHODS.items() if backend in s.backends and m != "dtype"]


def variant_graph(graph: OnnxGraph, quantization: Mapping[str, Any] | None, backend: str,
                  derive_context: Callable[[], DeriveContext],
                  weight_bytes: Callable[[OnnxGraph], int | None],
                  unquantized: tuple[str, int] = ("none", 32),
                  ) -> tuple[OnnxGraph, QuantizationRecord]:
    """``graph`` itself (recorded as ``unquantized``: method and bits) when the variant
    has no method, else the graph its method derives, with the record of either.
    ``derive_context`` is called only when a method needs it (its text side loads a
    tokenizer); ``weight_bytes`` sizes a graph (the .onnx file, or the IR's .bin)."""
    quant = dict(quantization or {})
    method = quant.pop("method", None)
    if method is None or method == "dtype":
        return graph, QuantizationRecord(unquantized[0], unquantized[1], weight_bytes(graph),
                                         {"graph": graph.info})
    params = validate_quantization(method, quant)
    spec = METHODS[method]
    if spec.derive is None or backend not in spec.backends:
        raise InputError(message=f"quantization method '{method}' is not applied by backend "
                         f"{backend}", field="quantization.method",
                         fix=f"use one of {', '.join(methods_for(backend))}")
    derived = spec.derive(graph, params, derive_context())
    return derived, QuantizationRecord(method, derived.info.get("bits"), weight_bytes(derived),
                                       {**params.model_dump(), "graph": derived.info})


def onnx_bytes(graph: OnnxGraph) -> int:
    """An ONNX graph's weight bytes: its file's size (weights are inside it)."""
    return graph.path.stat().st_size


def ir_bytes(graph: OnnxGraph) -> int | None:
    """An OpenVINO IR's weight bytes: its ``.bin``'s size, None when it has none."""
    weights = graph.path.with_suffix(".bin")
    return weights.stat().st_size if weights.is_file() else None


__all__ = ["ir_bytes", "methods_for", "onnx_bytes", "variant_graph"]
