"""Backend protocols: what the pipeline needs from anything that embeds text.

Backends (in-process PyTorch, vLLM engine or server, OpenAI-compatible and TEI HTTP
clients) differ in how they run, never in what they are asked: every encoding setting is
explicit here, sent explicitly to the engine, and recorded in the manifest, because
engines disagree on defaults (pooling, normalization, truncation, prefixes).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

Pooling = Literal["mean", "cls", "last"]
TruncationSide = Literal["right", "left"]


@dataclass(frozen=True)
class EncodingSettings:
    """Everything besides the weights that changes an embedding."""

    pooling: Pooling = "mean"
    normalize: bool = True
    max_length: int = 256
    truncation_side: TruncationSide = "right"
    query_prefix: str = ""
    document_prefix: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def fingerprint(self) -> str:
        blob = json.dumps(self.as_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def differences(self, other: EncodingSettings) -> dict[str, tuple[Any, Any]]:
        """Settings that differ, as ``{name: (self_value, other_value)}``."""
        mine, theirs = self.as_dict(), other.as_dict()
        return {k: (mine[k], theirs[k]) for k in mine if mine[k] != theirs[k]}


@dataclass(frozen=True)
class QuantizationRecord:
    """What a quantization method did, written into the run's manifest (mteb's habit)."""

    method: str  # "none", "dtype", "bitsandbytes", "torch-dynamic-int8", "w8a8-int8", ...
    bits: int | None
    weight_bytes: int | None  # bytes of weights held in memory after quantization
    params: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


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
