"""Backend protocols: what the pipeline needs from anything that embeds text.

Backends (in-process PyTorch, vLLM engine or server, OpenAI-compatible and TEI HTTP
clients) differ in how they run, never in what they are asked: every encoding setting is
explicit here, sent explicitly to the engine, and recorded in the manifest, because
engines disagree on defaults (pooling, normalization, truncation, prefixes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from evalq.core.values import EncodingSettings

__all__ = ["Encoder"]


@runtime_checkable
class Encoder(Protocol):
    """Embeds already-prefixed texts; batching, caching and ordering live in ``encode.py``."""

    settings: EncodingSettings

    def fingerprint(self) -> str:
        """Stable key of model weights + quantization + settings (embedding cache key)."""
        ...

    def describe(self) -> dict[str, Any]:
        """Manifest entry: backend, model, dtype, quantization record, engine versions."""
        ...

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        """Token counts after truncation, used to sort and pack batches by token budget."""
        ...

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 array (len(texts), dim), normalized when ``settings.normalize``."""
        ...

    def close(self) -> None:
        """Release the engine / stop the server. Idempotent."""
        ...
