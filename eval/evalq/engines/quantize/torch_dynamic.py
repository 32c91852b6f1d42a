"""PyTorch dynamic int8: Linear weights int8 (per-tensor), activations quantized per batch.

``torch.ao.quantization.quantize_dynamic`` is deprecated in favour of torchao but still
ships with PyTorch and runs anywhere on CPU. Its per-tensor weight scale visibly hurts
small encoders such as MiniLM (cosine to fp32 ≈ 0.92–0.95): a real regression that a
gate must catch, kept as a candidate for exactly that reason.

torchao's ``quantize_`` (the replacement) is not wired in: torchao is not part of the
``cpu`` extra, so that path could not be tested here, and an untested path is worse than
none. The record names the implementation, so adding it later changes fingerprints.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from evalq.core.errors import InputError
from evalq.core.values import QuantizationRecord
from evalq.engines.quantize.footprint import weight_bytes
from evalq.engines.quantize.loading import load_automodel

if TYPE_CHECKING:
    import torch

NAME = "torch-dynamic-int8"
SUMMARY = "torch.ao dynamic int8 quantization of nn.Linear (CPU only)"
# What this method supports (read by the plan stage): backends and devices.
BACKENDS = ("inprocess",)
DEVICES = ("cpu",)


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")


def load(model_path: Path, params: Params, device: str,
         dtype: str | None = None) -> tuple[torch.nn.Module, QuantizationRecord]:
    import torch

    if not device.startswith("cpu"):
        raise InputError(
            message=f"torch-dynamic-int8 runs on CPU only, not on '{device}'",
            field="device", fix="use device: cpu for this variant, or bitsandbytes on GPU",
        )
    if dtype not in (None, "float32"):
        raise InputError(
            message=f"torch-dynamic-int8 quantizes float32 weights; dtype '{dtype}' given",
            field="dtype", fix="drop dtype or set dtype: float32 for this variant",
        )
    model = load_automodel(model_path, dtype="float32", device="cpu")
    with warnings.catch_warnings():
        # Deprecated in favour of torchao, still correct; the warning is not the user's concern.
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", UserWarning)
        from torch.ao.quantization import quantize_dynamic

        model = quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8, inplace=True)
    record = QuantizationRecord(
        method=NAME, bits=8, weight_bytes=weight_bytes(model),
        params={**params.model_dump(), "implementation": "torch.ao.quantization.quantize_dynamic",
                "weight_scheme": "per_tensor_affine", "modules": ["Linear"]},
    )
    return model, record
