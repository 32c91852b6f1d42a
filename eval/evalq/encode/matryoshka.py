"""Matryoshka dimensions: keep the first ``dims`` coordinates of each vector, then scale it
back to unit length.

Matryoshka-trained models (Qwen3-Embedding, nomic-embed, OpenAI's text-embedding-3) put
the most information in the leading coordinates, so a prefix is a smaller embedding of the
same text. The order matters: a prefix of an already-normalized vector is shorter than 1,
and inner-product search over such prefixes weights each document by how much of its norm
the prefix happens to keep. So evalq truncates and *then* normalizes, as vLLM's pooler does
with its ``dimensions`` request field (truncate the pooled vector, then apply the
normalization) and sentence-transformers' ``truncate_dim`` followed by normalization.
Re-applying it to vectors a server already truncated and normalized changes nothing, so
served variants that sent ``dimensions`` pass through here too.
"""

from __future__ import annotations

import numpy as np


def truncate(vectors: np.ndarray, dims: int) -> np.ndarray:
    """The first ``dims`` coordinates of each row, renormalized to unit length (float32).

    An all-zero prefix stays zero (it has no direction); the run's vector checks report
    such rows rather than searching with them.
    """
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim != 2:
        raise ValueError(f"truncate needs a (n, dim) matrix, got shape {array.shape}")
    if not 1 <= dims <= array.shape[1]:
        raise ValueError(f"dims {dims} outside 1..{array.shape[1]}")
    prefix = np.array(array[:, :dims], dtype=np.float32)
    norms = np.linalg.norm(prefix.astype(np.float64), axis=1, keepdims=True)
    np.divide(prefix, norms, out=prefix, where=norms > 0)
    return prefix


def common_dims(reference: np.ndarray, candidate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Both matrices at the narrower one's width (truncated and renormalized), so per-text
    cosines between a full-width reference and a Matryoshka candidate are defined: they
    then measure the engine's and quantization's drift at equal width, while the ranking
    measures against the reference carry what the dropped coordinates cost."""
    width = min(reference.shape[1], candidate.shape[1])
    if reference.shape[1] == candidate.shape[1]:
        return reference, candidate
    return truncate(reference, width), truncate(candidate, width)
