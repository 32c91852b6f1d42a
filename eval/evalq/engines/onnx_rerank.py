"""The ``onnx`` reranker backend: a cross-encoder on ONNX Runtime's CPU execution provider.

How cross-encoders are usually served on CPUs (sentence-transformers' ``CrossEncoder(...,
backend="onnx")``, Infinity's optimum engine). The graph is evalq's export of the
pipeline's sequence-classification checkpoint with its logits as output
(``onnx_graph.LOGITS``, cached by weight fingerprint like the embedding export), or a
user's ``model.onnx`` (``onnx: {file: ...}`` on the reranker variant); the methods whose
``backends`` name ``onnx`` derive from it (``ort-dynamic-int8``; ``ort-static-int8``
calibrates on pairs made of corpus documents, ``pairfront``). Pair tokenization and the
score activation are the in-process cross-encoder's (``graph_reranker``).
"""

from __future__ import annotations

from pathlib import Path

from evalq.core.values import QuantizationRecord
from evalq.engines.context import RerankerContext
from evalq.engines.graph_reranker import GraphReranker, derive_context, graph_cache
from evalq.engines.graph_variant import onnx_bytes, variant_graph
from evalq.engines.onnx_backend import BACKEND_NAME, EXTRA, OrtSession
from evalq.engines.options import OnnxOptions
from evalq.engines.pairfront import PairFront
from evalq.engines.quantize.onnx_graph import (
    LOGITS,
    OnnxGraph,
    check_graph,
    export_onnx,
    require,
    user_graph,
)
from evalq.engines.reranker import Reranker, RerankSettings, rerank_settings
from evalq.engines.spec import BackendSpec

FIELD = "reranker.onnx.file"


class OnnxReranker(OrtSession, GraphReranker):
    """Reranker protocol on an ONNX Runtime session (CPU execution provider)."""

    backend = BACKEND_NAME

    def __init__(self, model_path: str | Path, graph: OnnxGraph, *,
                 settings: RerankSettings, record: QuantizationRecord,
                 options: OnnxOptions | None = None, field_name: str = FIELD,
                 front: PairFront | None = None) -> None:
        ort = require("onnxruntime", EXTRA, "the onnx reranker backend")
        super().__init__(model_path, graph, settings=settings, record=record,
                         field_name=field_name, front=front)
        self._inputs = check_graph(graph.path, self.num_labels, field_name=field_name,
                                   head=LOGITS)
        self._open(ort, graph, options, field_name)


def base_graph(options: OnnxOptions | None, model_path: Path, cache: Path) -> OnnxGraph:
    """The variant's fp32 graph: the user's file when given, else evalq's logits export."""
    if options is not None and options.file:
        return user_graph(options.file, field_name=FIELD)
    require("onnxruntime", EXTRA, "the onnx reranker backend")
    return export_onnx(model_path, cache, LOGITS)


def build(ctx: RerankerContext) -> Reranker:
    cache = graph_cache(ctx)
    settings = rerank_settings(ctx.spec, ctx.model_path)
    options = getattr(ctx.variant, BACKEND_NAME, None)
    front = PairFront(ctx.model_path, settings)
    graph, record = variant_graph(base_graph(options, ctx.model_path, cache),
                                  ctx.variant.quantization, BACKEND_NAME,
                                  lambda: derive_context(ctx, cache, front), onnx_bytes)
    return OnnxReranker(ctx.model_path, graph, settings=settings, record=record,
                        options=options, front=front)


SPEC = BackendSpec(BACKEND_NAME, "reranker", "in-process", build, quantized_by="evalq",
                   options_key=BACKEND_NAME, options_model=OnnxOptions,
                   model_kinds=("cross-encoder",), devices=("cpu",), dtypes=("float32",),
                   cache_key="scores keyed by the graph's content (weights fingerprint and "
                   "logits export, or the user file's hash), quantization, session "
                   "optimization, onnxruntime version, numerics class (int8), score settings, "
                   "pair")

__all__ = ["SPEC", "OnnxReranker", "base_graph", "build"]
