"""Core value types every layer shares: encoding settings, quantization records,
per-query values.

This module imports nothing of evalq, so nothing below it can reach up (no import
cycles through it). The old homes (``evalq.backends.base``, ``evalq.metrics.values``)
re-export these names, so existing imports keep working.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, model_validator

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


@dataclass(frozen=True)
class PerQuery:
    """``values[measure_name][i]`` is the value for ``query_ids[i]`` (float64, no NaN
    unless the measure is undefined for that query, which the measure documents)."""

    query_ids: tuple[str, ...]
    values: dict[str, np.ndarray]

    def mean(self, measure: str) -> float:
        return float(np.mean(self.values[measure])) if len(self.query_ids) else 0.0


def _is_number_field(annotation: Any) -> bool:
    args = {annotation, *getattr(annotation, "__args__", ())}
    return bool(args & {int, float}) and bool not in args


class FrozenModel(BaseModel):
    """A recipe section: unknown keys refused, immutable once parsed."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class StrictModel(FrozenModel):
    """A recipe section that also refuses ``true``/``false`` where a number belongs
    (pydantic reads true as 1; in a recipe that is always a slip: ``max_queries: true``).
    The base of the recipe's own sections and of the options models backends declare."""

    @model_validator(mode="before")
    @classmethod
    def _no_bools_as_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, value in data.items():
                info = cls.model_fields.get(name) if isinstance(name, str) else None
                if isinstance(value, bool) and info and _is_number_field(info.annotation):
                    raise ValueError(f"'{name}' must be a number, not {str(value).lower()}")
        return data


__all__ = ["EncodingSettings", "FrozenModel", "PerQuery", "Pooling", "QuantizationRecord",
           "StrictModel", "TruncationSide"]
