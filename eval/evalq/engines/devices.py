"""Devices and what vLLM can run on them: the rules an engine checks before it loads.

A leaf (it imports nothing of evalq's backends), so the vLLM engine, server and reranker
can check their own device without importing the backend registry that lists them;
:mod:`evalq.engines.capability` applies these rules by backend name for the plan.
See there for the rules and where they come from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from evalq.core.errors import InputError
from evalq.core.values import FLOAT_DTYPES

DeviceKind = Literal["cpu", "cuda"]


# vLLM quantization names -> (minimum CUDA compute capability, runs on x86 CPU).
# ``None`` means "pre-quantized checkpoint, read from its config.json".
_VLLM_QUANT: dict[str, tuple[tuple[int, int], bool]] = {
    "fp8": ((8, 9), False),
    "bitsandbytes": ((7, 0), False),
    "compressed-tensors": ((7, 5), True),
    "awq": ((7, 5), True),
    "awq_marlin": ((8, 0), False),
    "gptq": ((7, 5), True),
    "gptq_marlin": ((8, 0), False),
}
VLLM_CPU_QUANTIZATION = tuple(sorted(q for q, (_, cpu) in _VLLM_QUANT.items() if cpu))


@dataclass(frozen=True)
class DeviceInfo:
    """Where a backend would run: the kind, and for CUDA the first GPU's capability."""

    kind: DeviceKind
    name: str = "cpu"
    compute_capability: tuple[int, int] | None = None


def detect_device() -> DeviceInfo:
    """The current machine's device as vLLM would see it (first CUDA GPU, else CPU)."""
    try:
        import torch
    except ImportError:
        return DeviceInfo("cpu")
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(0)
        return DeviceInfo("cuda", torch.cuda.get_device_name(0), (major, minor))
    return DeviceInfo("cpu")


def _cc(cc: tuple[int, int] | None) -> str:
    return "unknown" if cc is None else f"{cc[0]}.{cc[1]}"


def check_vllm(
    device_kind: DeviceKind,
    quantization: str | None,
    dtype: str,
    cc: tuple[int, int] | None,
) -> None:
    if quantization is not None and quantization not in _VLLM_QUANT:
        raise InputError(
            message=f"vLLM quantization '{quantization}' is not one evalq knows",
            field="quantization",
            fix=f"use one of {', '.join(sorted(_VLLM_QUANT))}, or leave it empty to load a "
            "pre-quantized checkpoint by path",
        )
    if device_kind == "cpu":
        if quantization is not None and not _VLLM_QUANT[quantization][1]:
            need = "an NVIDIA GPU"
            if quantization == "fp8":
                need = "an NVIDIA GPU with compute capability >= 8.9 (Ada, Hopper)"
            raise InputError(
                message=f"vLLM quantization '{quantization}' needs {need}; this machine "
                "has only a CPU",
                field="quantization",
                fix="on CPU use a pre-quantized W8A8 int8 compressed-tensors checkpoint "
                "(quantization method 'w8a8-int8'), AWQ or GPTQ, or dtype float32/bfloat16; "
                "or run this variant on a GPU machine",
            )
        return
    if dtype == "bfloat16" and cc is not None and cc < (8, 0):
        raise InputError(
            message=f"bfloat16 needs compute capability >= 8.0; this GPU has {_cc(cc)}",
            field="dtype",
            fix="use dtype float16 or float32 on this GPU",
        )
    if quantization is None:
        return
    need_cc, _ = _VLLM_QUANT[quantization]
    if cc is not None and cc < need_cc:
        ok = sorted(q for q, (c, _) in _VLLM_QUANT.items() if c <= cc)
        raise InputError(
            message=f"vLLM quantization '{quantization}' needs compute capability >= "
            f"{_cc(need_cc)}; this GPU has {_cc(cc)}",
            field="quantization",
            fix=f"on this GPU use one of {', '.join(ok) or 'no quantization'}, "
            "or dtype float16",
        )


def check_dtype(dtype: str) -> None:
    if dtype not in FLOAT_DTYPES:
        raise InputError(
            message=f"unknown dtype '{dtype}'",
            field="dtype",
            fix=f"use one of {', '.join(FLOAT_DTYPES)}",
        )


def check_current_vllm(quantization: str | None, dtype: str) -> DeviceInfo:
    """:func:`check_vllm` against :func:`detect_device`, for an engine about to start."""
    check_dtype(dtype)
    device = detect_device()
    check_vllm(device.kind, quantization, dtype, device.compute_capability)
    return device


__all__ = ["VLLM_CPU_QUANTIZATION", "DeviceInfo", "DeviceKind", "check_current_vllm",
           "check_dtype", "check_vllm", "detect_device"]
