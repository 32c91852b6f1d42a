"""What the ONNX Runtime and OpenVINO cross-encoders share: everything but running the graph.

Both run an exported graph of the pipeline's sequence-classification checkpoint whose
first output is the head's logits ``(batch, num_labels)``. Pair tokenization
(``pairfront``), the head check, the score activation (``reranker.apply_activation``, the
in-process cross-encoder's own arithmetic), the logits' width check, the score-cache key
and the manifest's common fields live here once, so ONNX fp32 and OpenVINO fp32 differ
from the in-process cross-encoder in their kernels only.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.values import QuantizationRecord
from evalq.engines.context import RerankerContext
from evalq.engines.graph_model import GraphModel
from evalq.engines.pairfront import PairFront
from evalq.engines.quantize.derive import DeriveContext
from evalq.engines.quantize.onnx_graph import LOGITS, OnnxGraph, check_width
from evalq.engines.reranker import RerankSettings, apply_activation, check_head, num_labels


class GraphReranker(GraphModel):
    """Reranker protocol around a graph runtime; a subclass sets ``backend``, opens its
    runtime in ``__init__`` (setting ``_inputs``), and implements :meth:`_run` and
    :meth:`close` (after which :meth:`_ready` is false)."""

    kind = "cross-encoder"
    backend = ""

    def __init__(self, model_path: str | Path, graph: OnnxGraph, *,
                 settings: RerankSettings, record: QuantizationRecord, field_name: str,
                 front: PairFront | None = None) -> None:
        super().__init__(model_path, graph, settings=settings, record=record,
                         field_name=field_name)
        self.num_labels = num_labels(self.model_path)
        check_head(self.num_labels, settings, self.model_path)
        self._front = front or PairFront(self.model_path, settings)

    def identity(self) -> dict[str, Any]:
        return {"backend": self.backend, "kind": self.kind}

    def _description(self, **extra: Any) -> dict[str, Any]:
        return super()._description(num_labels=self.num_labels, **extra)

    def pair_lengths(self, queries: Sequence[str], documents: Sequence[str]) -> list[int]:
        return self._front.pair_lengths(queries, documents)

    def score(self, queries: Sequence[str], documents: Sequence[str]) -> np.ndarray:
        """float64 ``(n,)``: one graph run over the pairs padded to the longest, then the
        in-process cross-encoder's activation on the logits."""
        import torch

        if len(queries) != len(documents):
            raise ValueError(f"{len(queries)} queries for {len(documents)} documents")
        if not queries:
            return np.zeros(0, dtype=np.float64)
        if not self._ready():
            raise RuntimeError(f"{type(self).__name__}.score called after close()")
        batch = self._front.encode(queries, documents, padding=True, return_tensors="np")
        feed = {n: np.asarray(batch[n], dtype=np.int64) for n in self._inputs}
        logits = self._output(feed)
        self.forward_calls += 1
        if not self._width_checked:  # a user's graph may hold another head
            check_width(logits.shape[-1] if logits.ndim == 2 else -1, self.num_labels,
                        self.graph.path, self._field, LOGITS)
            self._width_checked = True
        if not np.isfinite(logits).all():  # zeros are legal logits; NaN and inf are not
            self._check_user_output(logits, "logits")
        with torch.inference_mode():
            scores = apply_activation(torch.from_numpy(np.ascontiguousarray(logits)),
                                      self.settings)
        return scores.to(dtype=torch.float64).numpy()


def graph_cache(ctx: RerankerContext) -> Path:
    """The folder a graph reranker's exports and derived graphs are cached in. Its dtype,
    device and model kind were checked when the recipe was read (the backend's declared
    ``dtypes``, ``devices`` and ``model_kinds``)."""
    root = ctx.cache_dir if ctx.cache_dir is not None else Path(tempfile.gettempdir()) / "evalq"
    return Path(root) / "checkpoints"


def derive_context(ctx: RerankerContext, cache: Path, front: PairFront) -> DeriveContext:
    """What a quantization method of a graph reranker gets: calibration pairs made of the
    pipeline's corpus documents through ``front``."""
    return DeriveContext(cache, front, ctx.calibration, ctx.model_path)


__all__ = ["GraphReranker", "derive_context", "graph_cache", "num_labels"]
