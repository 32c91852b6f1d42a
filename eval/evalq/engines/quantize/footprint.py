"""Bytes of weights a model actually holds in memory, packed formats counted as stored.

``sum(p.numel() * p.element_size())`` over ``parameters()`` is wrong for quantized
models in both directions: bitsandbytes keeps its per-block scales (absmax, nested
quantization state, code books) outside the parameter list, and PyTorch's dynamic int8
Linear holds its weights in a packed C++ object that ``parameters()`` never yields. The
"bytes saved" figure a user acts on must count what is really there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def _tensor_bytes(tensor: torch.Tensor) -> int:
    size = tensor.numel() * tensor.element_size()
    if tensor.is_quantized:
        import torch

        if tensor.qscheme() in (torch.per_channel_affine, torch.per_channel_symmetric,
                                torch.per_channel_affine_float_qparams):
            size += tensor.q_per_channel_scales().numel() * 8
            size += tensor.q_per_channel_zero_points().numel() * 8
        else:
            size += 16  # one float64 scale + one int64 zero point
    return size


def _quant_state_tensors(state: Any) -> list[torch.Tensor]:
    """Tensors of a bitsandbytes 4-bit QuantState, its nested state included."""
    import torch

    found: list[torch.Tensor] = []
    for name in ("absmax", "code", "offset"):
        value = getattr(state, name, None)
        if isinstance(value, torch.Tensor):
            found.append(value)
    nested = getattr(state, "state2", None)
    if nested is not None:
        found.extend(_quant_state_tensors(nested))
    return found


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes of parameters, buffers and quantization side tensors, each storage counted once."""
    import torch

    seen: set[tuple[int, int, str]] = set()
    # Unpacked copies (torch.ao) are fresh tensors: hold them until the end, or a freed
    # copy's address is reused by the next one and the storage dedup drops real bytes.
    alive: list[torch.Tensor] = []
    total = 0

    def add(tensor: torch.Tensor | None) -> None:
        nonlocal total
        if tensor is None:
            return
        alive.append(tensor)
        key = (tensor.data_ptr(), tensor.numel(), str(tensor.dtype))
        if key in seen:
            return
        seen.add(key)
        total += _tensor_bytes(tensor)

    for module in model.modules():
        for tensor in module.parameters(recurse=False):
            add(tensor)
            # bitsandbytes int8: per-row scales live on the parameter object
            scb = getattr(tensor, "SCB", None)
            if isinstance(scb, torch.Tensor):
                add(scb)
            state = getattr(tensor, "quant_state", None)
            if state is not None:
                for side in _quant_state_tensors(state):
                    add(side)
        for tensor in module.buffers(recurse=False):
            add(tensor)
        packed = getattr(module, "_packed_params", None)
        weight_bias = getattr(module, "_weight_bias", None)
        if packed is not None and not isinstance(packed, torch.nn.Module) and callable(weight_bias):
            # torch.ao LinearPackedParams: int8 weights and bias packed outside parameters().
            # Only this innermost holder is counted; the Linear above it exposes the same.
            qweight, bias = weight_bias()
            add(qweight)
            add(bias)
    return total
