"""The ``onnx`` embedding backend: ONNX Runtime's CPU execution provider, in-process.

This is how small embedding models are usually served on CPUs (sentence-transformers'
``backend="onnx"``, TEI's CPU images, Infinity's optimum engine). The graph is evalq's
export of the recipe's checkpoint (``quantize.onnx_graph``) or a user's ``model.onnx``
(``onnx: {file: ...}``); the quantization methods whose ``backends`` name ``onnx``
(ORT dynamic and static int8, offline graph optimization) derive a graph from it.
Tokenization, pooling, normalization and truncation are ``textfront``'s, the in-process
backend's own, so ONNX fp32 is judged on its kernels alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.errors import InputError
from evalq.core.protocols import Encoder
from evalq.core.values import EncodingSettings, QuantizationRecord
from evalq.engines.context import BuildContext
from evalq.engines.graph_encoder import GraphEncoder, declared_dependence
from evalq.engines.graph_model import GraphModel
from evalq.engines.graph_variant import methods_for, onnx_bytes, variant_graph
from evalq.engines.inprocess import PADDED_FLOAT
from evalq.engines.options import ONNX_BACKEND, EncoderVariant, OnnxOptions
from evalq.engines.quantize import ort_dynamic, ort_optimize, ort_static
from evalq.engines.quantize.derive import DeriveContext
from evalq.engines.quantize.onnx_graph import (
    OPSET,
    OnnxGraph,
    check_graph,
    export_onnx,
    require,
    user_graph,
    versions,
)
from evalq.engines.spec import NEAR_INVARIANT_TOLERANCE, BackendSpec, BatchDependence
from evalq.engines.textfront import TokenizerFront

BACKEND_NAME = ONNX_BACKEND
EXTRA = "onnx"
# ONNX Runtime's session-level graph optimization levels, by the names its docs use.
SESSION_LEVELS = {"disabled": "ORT_DISABLE_ALL", "basic": "ORT_ENABLE_BASIC",
                  "extended": "ORT_ENABLE_EXTENDED", "all": "ORT_ENABLE_ALL"}




class OrtSession(GraphModel):
    """The ONNX Runtime half of the onnx encoder and reranker: the session, its cache-key
    part and description, the run and close. Listed before ``GraphEncoder`` /
    ``GraphReranker`` in a backend class, it fills in ``GraphModel``'s runtime half."""

    options: OnnxOptions
    _session: Any

    def _open(self, ort: Any, graph: OnnxGraph, options: OnnxOptions | None,
              field_name: str) -> None:
        self.options = options or OnnxOptions()
        self._session = open_session(ort, graph.path, self.options, field_name)

    def fingerprint(self) -> str:
        """Cache key: the shared part, the session's optimization level, ORT's version."""
        return self._key(session=self.options.graph_optimization,
                         versions=versions("onnxruntime"))

    def describe(self) -> dict[str, Any]:
        return self._description(
            dtype="float32", execution_provider="CPUExecutionProvider",
            threads=self.options.threads,
            session_graph_optimization=self.options.graph_optimization,
            versions=versions("onnxruntime", "onnx", "transformers"))

    def _run(self, feed: dict[str, np.ndarray]) -> Any:
        return self._session.run(None, feed)[0]

    def _ready(self) -> bool:
        return self._session is not None

    def close(self) -> None:
        self._session = None


class OnnxEncoder(OrtSession, GraphEncoder):
    """Encoder protocol on an ONNX Runtime session (CPU execution provider)."""

    backend_name = BACKEND_NAME

    def __init__(self, model_path: str | Path, graph: OnnxGraph, *,
                 settings: EncodingSettings, record: QuantizationRecord,
                 options: OnnxOptions | None = None, field_name: str = "onnx.file",
                 front: TokenizerFront | None = None) -> None:
        ort = require("onnxruntime", EXTRA, "the onnx backend")
        super().__init__(model_path, graph, settings=settings, record=record,
                         field_name=field_name, front=front)
        self._inputs = check_graph(graph.path, self.dim, field_name=field_name)
        self._open(ort, graph, options, field_name)


def open_session(ort: Any, path: Path, options: OnnxOptions, field_name: str) -> Any:
    """An ONNX Runtime CPU session; a graph it cannot run (an operator it has no kernel
    for, a malformed model) is the user's file's problem (exit 2)."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel,
                                            SESSION_LEVELS[options.graph_optimization])
    if options.threads is not None:
        opts.intra_op_num_threads = options.threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    try:
        return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime's Fail / NotImplemented / InvalidGraph
        raise InputError(message=f"ONNX Runtime cannot run '{path}': "
                         f"{type(exc).__name__}: {str(exc)[:300]}", file=path,
                         field=field_name,
                         fix="use operators ONNX Runtime's CPU provider implements (re-export "
                         f"with opset {OPSET} from torch, or let evalq export the model)") from None


def base_graph(ctx: BuildContext, options: OnnxOptions | None) -> OnnxGraph:
    """The variant's fp32 graph: the user's file when given, else evalq's export."""
    if options is not None and options.file:
        return user_graph(options.file, field_name="onnx.file")
    require("onnxruntime", EXTRA, "the onnx backend")
    return export_onnx(ctx.model_path, ctx.cache_dir / "checkpoints")


def graph_for(variant: EncoderVariant, ctx: BuildContext, front: TokenizerFront | None = None,
              ) -> tuple[OnnxGraph, QuantizationRecord]:
    """The graph a variant runs (base, or derived by its quantization method) and the
    record of what was done to it."""
    graph = base_graph(ctx, getattr(variant, BACKEND_NAME, None))
    return variant_graph(graph, variant.quantization, BACKEND_NAME, lambda: DeriveContext(
        ctx.cache_dir / "checkpoints",
        front or TokenizerFront(ctx.model_path, ctx.settings, ctx.tokenizer),
        ctx.calibration, ctx.model_path, ctx.known_draws), onnx_bytes)


def build(variant: EncoderVariant, ctx: BuildContext) -> Encoder:
    if ctx.device != "cpu" and variant.device == "cuda":
        raise InputError(message="backend onnx runs ONNX Runtime's CPU execution provider",
                         field="device", fix="use device: cpu (or auto) for this variant")
    front = TokenizerFront(ctx.model_path, ctx.settings, ctx.tokenizer)
    graph, record = graph_for(variant, ctx, front)
    return OnnxEncoder(ctx.model_path, graph, settings=ctx.settings, record=record,
                       options=getattr(variant, BACKEND_NAME, None), front=front)


# Batch dependence of each quantization method this backend applies; every one is
# checked against the real encoder by tests/encode/test_composition.py.
DECLARED = {
    ort_dynamic.NAME: BatchDependence(
        "dependent",
        "DynamicQuantizeLinear scales each MatMul input per tensor: one scale per batch, set "
        "by the batch's largest activation", None),
    ort_static.NAME: BatchDependence(
        "near-invariant",
        "activation scales fixed at calibration and masked attention: neighbours change only "
        "padding (measured 0 between the compositions of tests/encode/test_composition.py; the "
        "tolerance leaves room for a rounding that crosses one quantization step)", 1e-2),
    ort_optimize.NAME: BatchDependence(
        "near-invariant",
        "float32 fused graph, masked attention and per-text pooling: neighbours only change "
        "padding", NEAR_INVARIANT_TOLERANCE),
}


def batch_dependence(variant: EncoderVariant) -> BatchDependence:
    return declared_dependence(BACKEND_NAME, (variant.quantization or {}).get("method"),
                               DECLARED, PADDED_FLOAT)


SPEC = BackendSpec(BACKEND_NAME, "embedding", "in-process", build, quantized_by="evalq",
                   options_key=BACKEND_NAME, options_model=OnnxOptions,
                   devices=("cpu",), dtypes=("float32",), batch_dependence=batch_dependence,
                   cache_key="chunks keyed by the graph's content (weights fingerprint and "
                   "export, or the user file's hash), quantization, session optimization, "
                   "onnxruntime version, numerics class (int8), settings, texts")

__all__ = [
    "BACKEND_NAME",
    "SPEC",
    "OnnxEncoder",
    "OnnxOptions",
    "OrtSession",
    "base_graph",
    "build",
    "graph_for",
    "methods_for",
    "open_session",
]
