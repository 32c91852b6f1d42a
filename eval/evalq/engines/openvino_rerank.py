"""The ``openvino`` reranker backend: a cross-encoder on OpenVINO's CPU plugin.

The IR is converted from evalq's logits export of the pipeline's sequence-classification
checkpoint (``onnx_graph.LOGITS`` through ``openvino_ir.convert_ir``; ``dtype: float16``
stores float16 weights), or is a user's ``openvino_model.xml`` (``openvino: {file:
...}`` on the reranker variant); ``nncf-int8`` derives an int8 IR calibrated on pairs
made of corpus documents (``pairfront``). Pair tokenization and the score activation are
the in-process cross-encoder's (``graph_reranker``).
"""

from __future__ import annotations

from pathlib import Path

from evalq.core.values import QuantizationRecord
from evalq.engines.context import RerankerContext
from evalq.engines.graph_reranker import GraphReranker, derive_context, graph_cache
from evalq.engines.graph_variant import ir_bytes, variant_graph
from evalq.engines.openvino_backend import BACKEND_NAME, OpenVinoModel, base_ir
from evalq.engines.options import OpenVinoOptions
from evalq.engines.pairfront import PairFront
from evalq.engines.quantize.onnx_graph import LOGITS, OnnxGraph, require
from evalq.engines.quantize.openvino_ir import EXTRA
from evalq.engines.reranker import Reranker, RerankSettings, rerank_settings
from evalq.engines.spec import BackendSpec

FIELD = "reranker.openvino.file"
# What this backend serves: OpenVINO compresses IR weights to f16, never bf16.
DTYPES = ("float32", "float16")


class OpenVinoReranker(OpenVinoModel, GraphReranker):
    """Reranker protocol on a compiled OpenVINO model (CPU plugin, float32 inference)."""

    backend = BACKEND_NAME

    def __init__(self, model_path: str | Path, graph: OnnxGraph, *,
                 settings: RerankSettings, record: QuantizationRecord, dtype: str = "float32",
                 options: OpenVinoOptions | None = None, field_name: str = FIELD,
                 front: PairFront | None = None) -> None:
        ov = require("openvino", EXTRA, "the openvino reranker backend")
        super().__init__(model_path, graph, settings=settings, record=record,
                         field_name=field_name, front=front)
        self._compile(ov, graph, self.num_labels, dtype, options, field_name, head=LOGITS)


def build(ctx: RerankerContext) -> Reranker:
    cache = graph_cache(ctx)
    variant = ctx.variant
    fp16 = variant.dtype == "float16"
    settings = rerank_settings(ctx.spec, ctx.model_path)
    options = getattr(variant, BACKEND_NAME, None)
    front = PairFront(ctx.model_path, settings)
    base = base_ir(options, ctx.model_path, cache.parent, fp16=fp16, head=LOGITS,
                   field_name=FIELD)
    graph, record = variant_graph(base, variant.quantization, BACKEND_NAME,
                                  lambda: derive_context(ctx, cache, front), ir_bytes,
                                  unquantized=("dtype", 16) if fp16 else ("none", 32))
    return OpenVinoReranker(ctx.model_path, graph, settings=settings, record=record,
                            dtype=variant.dtype, options=options, front=front)


SPEC = BackendSpec(BACKEND_NAME, "reranker", "in-process", build, quantized_by="evalq",
                   options_key=BACKEND_NAME, options_model=OpenVinoOptions,
                   model_kinds=("cross-encoder",), devices=("cpu",), dtypes=DTYPES,
                   cache_key="scores keyed by the IR's content (weights fingerprint, logits "
                   "export and conversion, or the user file's hash), dtype, quantization, "
                   "OpenVINO version, numerics class (int8, bf16), score settings, pair")

__all__ = ["DTYPES", "SPEC", "OpenVinoReranker", "build"]
