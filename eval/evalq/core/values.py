"""Core value types every layer shares: encoding settings, quantization records,
per-query values.

This module imports nothing of evalq, so nothing below it can reach up (no import
cycles through it); every part imports these types from here.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

import numpy as np

Pooling = Literal["mean", "cls", "last"]
TruncationSide = Literal["right", "left"]
PaddingSide = Literal["right", "left"]

# The floating-point dtypes a variant can load weights in: the recipe's choices, the
# backends' declarations and the checks all read this one list.
FloatDtype = Literal["float32", "float16", "bfloat16"]
FLOAT_DTYPES: tuple[str, ...] = get_args(FloatDtype)

# Settings added after caches, manifests and baselines were first written. They are left out
# of ``as_dict()`` (and so of fingerprints and manifests) while at these defaults, so every
# model that does not use them keeps the cache keys it had.
LATER_DEFAULTS: dict[str, Any] = {"padding_side": "right", "append_eos": False}


@dataclass(frozen=True)
class EncodingSettings:
    """Everything besides the weights that changes an embedding."""

    pooling: Pooling = "mean"
    normalize: bool = True
    max_length: int = 256
    truncation_side: TruncationSide = "right"
    query_prefix: str = ""
    document_prefix: str = ""
    # Decoder embedders: the tokenizer's padding side (last-token pooling must find the
    # last real token either way) and whether evalq appends the EOS token to the token ids
    # itself, for models whose tokenizer does not append the EOS their pooling reads.
    padding_side: PaddingSide = "right"
    append_eos: bool = False

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for name, default in LATER_DEFAULTS.items():
            if out[name] == default:
                del out[name]
        return out

    def fingerprint(self) -> str:
        blob = json.dumps(self.as_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def differences(self, other: EncodingSettings) -> dict[str, tuple[Any, Any]]:
        """Settings that differ, as ``{name: (self_value, other_value)}``."""
        mine, theirs = asdict(self), asdict(other)
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


@dataclass(frozen=True)
class PerQuery:
    """``values[measure_name][i]`` is the value for ``query_ids[i]`` (float64, no NaN
    unless the measure is undefined for that query, which the measure documents)."""

    query_ids: tuple[str, ...]
    values: dict[str, np.ndarray]

    def mean(self, measure: str) -> float:
        return float(np.mean(self.values[measure])) if len(self.query_ids) else 0.0


__all__ = ["LATER_DEFAULTS", "EncodingSettings", "PaddingSide", "PerQuery", "Pooling",
           "QuantizationRecord", "TruncationSide", "vector_problem"]


def vector_problem(array: np.ndarray) -> str | None:
    """What makes a matrix of embeddings unusable (NaN, Inf, all-zero rows), or None."""
    if array.ndim != 2 or array.size == 0:
        return None
    finite = np.isfinite(array)
    if not finite.all():
        rows = np.flatnonzero(~finite.all(axis=1))
        kind = "NaN" if np.isnan(array).any() else "Inf"
        return f"holding {kind} values in {len(rows)} row(s) (first: row {int(rows[0])})"
    zero = np.flatnonzero(~array.any(axis=1))
    if len(zero):
        return f"holding {len(zero)} all-zero vector(s) (first: row {int(zero[0])})"
    return None
