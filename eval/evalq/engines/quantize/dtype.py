"""Floating-point casts: float32 (the usual reference), float16, bfloat16.

Not quantization in the integer sense, but the cheapest way to halve weight memory, and a
candidate users compare first. Every weight (embeddings included) is held in the dtype;
pooling is accumulated in float32 by the backend.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from evalq.core.errors import InputError
from evalq.core.values import FloatDtype, QuantizationRecord
from evalq.engines.quantize.footprint import weight_bytes
from evalq.engines.quantize.loading import check_device, load_automodel

if TYPE_CHECKING:
    import torch

NAME = "dtype"
SUMMARY = "cast all weights to float32, float16 or bfloat16"
# What this method supports (read by the plan stage): backends and devices.
BACKENDS = ("inprocess",)
DEVICES = ("cpu", "cuda")
_BITS = {"float32": 32, "float16": 16, "bfloat16": 16}


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dtype: FloatDtype = "float32"


def load(model_path: Path, params: Params, device: str,
         dtype: str | None = None) -> tuple[torch.nn.Module, QuantizationRecord]:
    """Load with weights in ``params.dtype`` (``dtype``, when given, must agree)."""
    if dtype is not None and dtype != params.dtype:
        raise InputError(
            message=f"dtype '{dtype}' disagrees with the dtype method's '{params.dtype}'",
            field="dtype", fix="give the dtype once",
        )
    check_device(device)
    model = load_automodel(model_path, dtype=params.dtype, device=device)
    record = QuantizationRecord(
        method=NAME, bits=_BITS[params.dtype], weight_bytes=weight_bytes(model),
        params=params.model_dump(),
    )
    return model, record
