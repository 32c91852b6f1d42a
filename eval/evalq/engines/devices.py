"""Devices and what vLLM can run on them: the rules an engine checks before it loads.

A leaf (it imports nothing of evalq's backends), so the vLLM engine, server and reranker
can check their own device without importing the backend registry that lists them;
:mod:`evalq.engines.capability` applies these rules by backend name for the plan.
See there for the rules and where they come from.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

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


def amx_int8_kernel() -> bool:
    """Whether vLLM's CPU build takes its AMX int8 GEMM (its ``sgl`` kernel) for a
    symmetric W8A8 layer here. vLLM decides by asking torch whether the CPU has AMX
    tiles (``torch.cpu._is_amx_tile_supported``, which reads the CPU, so no ISA cap
    lowers it); this asks the same question."""
    try:
        import torch
    except ImportError:
        return False
    probe = getattr(torch.cpu, "_is_amx_tile_supported", None)
    return bool(probe()) if callable(probe) else False


def symmetric_int8_activations(model_path: str | Path | None) -> bool:
    """Whether a checkpoint's ``config.json`` declares compressed-tensors int8 weights
    with symmetric 8-bit integer input activations (evalq's ``w8a8-int8``, and
    llm-compressor's W8A8 recipes): the layers vLLM's AMX int8 kernel takes."""
    if model_path is None:
        return False
    try:
        config = json.loads((Path(model_path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    quant = config.get("quantization_config") if isinstance(config, dict) else None
    groups = quant.get("config_groups") if isinstance(quant, dict) else None
    if not isinstance(groups, dict):
        return False
    return any(_int8(g.get("weights")) and _int8(g.get("input_activations"))
               and g["input_activations"].get("symmetric", True) is True
               for g in groups.values() if isinstance(g, dict))


def _int8(part: Any) -> bool:
    return isinstance(part, dict) and part.get("num_bits") == 8 and part.get("type") == "int"


def check_cpu_int8_dtype(device_kind: DeviceKind, symmetric_int8: bool, dtype: str) -> None:
    """vLLM's AMX int8 kernel takes bfloat16 activations only. Measured with vLLM 0.32's
    CPU build on an x86-64/amx host (Intel Xeon, AMX tiles): a W8A8 checkpoint at
    float32 dies in the engine on its first batch (``int8_scaled_mm_with_quant: expect A
    to be bfloat16 or half``), at float16 the engine aborts (``scale_C: scalar path not
    implemented``); at bfloat16 it serves (the W8A8 tests hold it to mean cosine >= 0.99
    to fp32). Without AMX the oneDNN kernel runs float32 too. Refused before the engine
    loads, so a recipe certified on another CPU says what to change instead of dying in a
    worker."""
    if device_kind != "cpu" or not symmetric_int8 or dtype == "bfloat16":
        return
    if not amx_int8_kernel():
        return
    raise InputError(
        message=f"vLLM runs a W8A8 int8 checkpoint on this CPU (AMX tiles) with its AMX "
        f"int8 kernel, which takes bfloat16 activations only: dtype {dtype} fails inside "
        "the engine",
        field="dtype",
        fix="set dtype: bfloat16 for this variant (what a vLLM deployment on an AMX CPU "
        "serves; certify that), or run it on a CPU without AMX, where vLLM's oneDNN int8 "
        "kernel also takes float32",
    )


def check_current_vllm(quantization: str | None, dtype: str,
                       model_path: str | Path | None = None) -> DeviceInfo:
    """:func:`check_vllm` against :func:`detect_device`, for an engine about to start;
    with ``model_path``, also what its checkpoint needs of this CPU
    (:func:`check_cpu_int8_dtype`)."""
    check_dtype(dtype)
    device = detect_device()
    check_vllm(device.kind, quantization, dtype, device.compute_capability)
    check_cpu_int8_dtype(device.kind, symmetric_int8_activations(model_path), dtype)
    return device


__all__ = ["VLLM_CPU_QUANTIZATION", "DeviceInfo", "DeviceKind", "amx_int8_kernel",
           "check_cpu_int8_dtype", "check_current_vllm", "check_dtype", "check_vllm",
           "detect_device", "symmetric_int8_activations"]
