"""bitsandbytes: LLM.int8 (8-bit, outlier columns kept in fp16) and 4-bit nf4 / fp4.

Loaded through transformers' ``BitsAndBytesConfig`` (the path users take in production).
On CPU it needs ``accelerate`` and bitsandbytes >= 0.45's CPU kernels; only ``nn.Linear``
layers are quantized, so the word-embedding table (half of MiniLM's bytes) stays in the
load dtype — which is why bnb saves less memory on small encoders than a bf16 cast.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from evalq.core.errors import MissingExtraError
from evalq.core.values import FloatDtype, QuantizationRecord
from evalq.engines.quantize.footprint import weight_bytes
from evalq.engines.quantize.loading import check_device, load_automodel, torch_dtype

if TYPE_CHECKING:
    import torch

NAME = "bitsandbytes"
SUMMARY = "bitsandbytes LLM.int8 (bits: 8) or 4-bit nf4/fp4 (bits: 4) Linear weights"
# What this method supports (read by the plan stage): backends and devices.
BACKENDS = ("inprocess",)
DEVICES = ("cpu", "cuda")


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")

    bits: Literal[8, 4]
    type: Literal["nf4", "fp4"] | None = Field(
        default=None, description="4-bit data type; nf4 when bits is 4 and type is not given")
    compute_dtype: FloatDtype = Field(
        default="float32", description="dtype of the 4-bit matmuls (bits: 4 only)")
    double_quant: bool = Field(
        default=False, description="quantize the 4-bit block scales too (bits: 4 only)")
    int8_threshold: float = Field(
        default=6.0, gt=0, description="LLM.int8 outlier threshold (bits: 8 only)")

    @field_validator("type")
    @classmethod
    def _type_needs_4_bits(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("bits") == 8:
            raise ValueError("'type' (nf4/fp4) applies to bits: 4 only")
        return value

    @model_validator(mode="after")
    def _default_type(self) -> Params:
        if self.bits == 4 and self.type is None:
            self.type = "nf4"
        return self


class _DropCastNotice(logging.Filter):
    """LLM.int8 logs a warning on every matmul that it casts float32 inputs to float16.

    That cast is the method (recorded in the manifest), not a problem to report per batch.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        return "inputs will be cast" not in record.getMessage()


_CAST_FILTER = _DropCastNotice()


def _require_bitsandbytes() -> None:
    try:
        import accelerate  # noqa: F401
        import bitsandbytes  # noqa: F401
    except ImportError as exc:
        raise MissingExtraError(exc.name or "bitsandbytes", "cpu",
                                "bitsandbytes quantization") from exc


def load(model_path: Path, params: Params, device: str,
         dtype: str | None = None) -> tuple[torch.nn.Module, QuantizationRecord]:
    """Load with Linear weights quantized by bitsandbytes; other weights in ``dtype``."""
    check_device(device)
    _require_bitsandbytes()
    from transformers import BitsAndBytesConfig

    if params.bits == 8:
        config = BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=params.int8_threshold)
    else:
        config = BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type=params.type,
            bnb_4bit_compute_dtype=torch_dtype(params.compute_dtype),
            bnb_4bit_use_double_quant=params.double_quant,
        )
    cast_logger = logging.getLogger("bitsandbytes.autograd._functions")
    if _CAST_FILTER not in cast_logger.filters:
        cast_logger.addFilter(_CAST_FILTER)
    model = load_automodel(model_path, dtype=dtype or "float32", device=device,
                           quantization_config=config, device_map={"": device})
    dumped = params.model_dump()
    if params.bits == 8:
        dumped = {k: dumped[k] for k in ("bits", "int8_threshold")}
    else:
        dumped.pop("int8_threshold")
    record = QuantizationRecord(method=NAME, bits=params.bits,
                                weight_bytes=weight_bytes(model), params=dumped)
    return model, record
