"""What the ONNX Runtime and OpenVINO encoders share: everything but running the graph.

Both run an exported graph of the recipe's checkpoint whose first output is the token
states; the text side (``textfront``: tokenization, padding side, EOS, pooling,
normalization), the width check of the graph's output against the model's hidden size,
the cache key's common part and the manifest's common fields are the same for both, so
they live here once and a third graph runtime would add only its session.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.values import EncodingSettings, QuantizationRecord
from evalq.engines.graph_model import GraphModel
from evalq.engines.quantize.derive import hidden_size
from evalq.engines.quantize.onnx_graph import OnnxGraph, check_width
from evalq.engines.spec import BatchDependence
from evalq.engines.textfront import TokenizerFront, pooled_vectors


class GraphEncoder(GraphModel):
    """Encoder protocol around a graph runtime; a subclass sets ``backend_name`` and
    ``_inputs``, opens its runtime in ``__init__`` and implements :meth:`_run` and
    :meth:`close` (after which :meth:`_ready` is false)."""

    backend_name = ""

    def __init__(self, model_path: str | Path, graph: OnnxGraph, *,
                 settings: EncodingSettings, record: QuantizationRecord,
                 field_name: str, front: TokenizerFront | None = None) -> None:
        super().__init__(model_path, graph, settings=settings, record=record,
                         field_name=field_name)
        self.dim = hidden_size(self.model_path)
        # the builder's front where it made one (a second load of the tokenizer otherwise)
        self._front = front or TokenizerFront(self.model_path, settings)

    def identity(self) -> dict[str, Any]:
        return {"backend": self.backend_name}

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        return self._front.token_lengths(texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 ``(len(texts), dim)``; one graph run over the batch padded to its
        longest, pooled by ``textfront``."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if not self._ready():
            raise RuntimeError(f"{type(self).__name__}.embed called after close()")
        batch = self._front.batch(texts, tensors="np")
        feed = {n: np.asarray(batch[n], dtype=np.int64) for n in self._inputs}
        hidden = self._output(feed)
        self.forward_calls += 1
        if not self._width_checked:  # a user's graph may hold another model's width
            check_width(hidden.shape[-1] if hidden.ndim == 3 else -1, self.dim,
                        self.graph.path, self._field)
            self._width_checked = True
        if not np.isfinite(hidden).all():  # before pooling, which turns inf into NaN
            self._check_user_output(hidden.reshape(len(hidden), -1), "token states")
        vectors = pooled_vectors(hidden, batch["attention_mask"], self.settings)
        self._check_user_output(vectors, "embeddings")
        return vectors


def declared_dependence(backend: str, method: str | None,
                        declared: dict[str, BatchDependence],
                        unquantized: BatchDependence) -> BatchDependence:
    """A graph backend's batch-dependence declaration for a variant's quantization
    method (``unquantized`` without one); a method the backend declares nothing for is
    unverified, so batching goes into its cache key and is measured."""
    if method is None or method == "dtype":
        return unquantized
    if method in declared:
        return declared[method]
    return BatchDependence("unverified", f"no declaration for backend {backend!r} "
                           f"with quantization {method!r}", None)


__all__ = ["GraphEncoder", "declared_dependence"]
