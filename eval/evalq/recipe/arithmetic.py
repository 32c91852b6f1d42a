"""The arithmetic a variant will run at on this machine, in words, for the plan.

A verdict certifies numbers, and the numbers depend on the arithmetic: int8 kernels
differ by instruction set (the numerics class, ``evalq.core.host``), and OpenVINO's CPU
plugin computes in bf16 by default where the CPU has native bf16, unless evalq pins f32.
The plan says which it will be before anything loads, read from the host's flags (no
engine is imported to ask).
"""

from __future__ import annotations

from typing import Any

from evalq.core.host import HostFacts, openvino_default

# Methods that change weights or graphs without putting integer kernels in the path.
_NOT_INTEGER = ("dtype", "ort-optimize")


def _float_part(variant: Any, host: HostFacts) -> str:
    if variant.backend == "openvino":
        options = getattr(variant, "openvino", None)
        if options is not None and options.precision == "default":
            return (f"{openvino_default(host)} (OpenVINO's default on this CPU; "
                    "what a deployment without a config serves)")
        return (f"f32 (pinned; 'openvino: {{precision: default}}' would run "
                f"{openvino_default(host)} here)")
    return {"float32": "fp32"}.get(variant.dtype, variant.dtype)


def planned_arithmetic(variant: Any, device: str, host: HostFacts) -> str:
    """``variant`` (a recipe variant) on ``device`` as the plan resolved it."""
    if device in ("remote", "server"):
        return "the server's own choice (not visible from here; the manifest records " \
               "what the server reports)"
    method = (variant.quantization or {}).get("method")
    floats = _float_part(variant, host)
    if device != "cpu":
        return f"{method} on {device}, other operations {floats}" if method else floats
    if method and method not in _NOT_INTEGER:
        return (f"int8 kernels ({method}) of numerics class {host.numerics_class}, "
                f"other operations {floats}")
    return floats


__all__ = ["planned_arithmetic"]
