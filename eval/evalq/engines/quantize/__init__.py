"""Quantization methods: a registry, one module per method.

Each method module defines ``NAME``, ``SUMMARY``, a pydantic ``Params`` model (unknown
keys refused) and ``load(model_path, params, device, dtype=None) -> (model, record)``
returning a transformers ``AutoModel`` in eval mode and a :class:`QuantizationRecord`
(bits, bytes of weights actually held, the validated parameters with defaults filled
in, so two spellings of the same method hash alike).

Importing this package is light: pydantic only. torch, transformers and bitsandbytes
are imported by ``load`` when a model is actually built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from evalq.core.errors import InputError
from evalq.core.values import QuantizationRecord
from evalq.engines.quantize import (
    bnb,
    dtype,
    nncf_int8,
    ort_dynamic,
    ort_optimize,
    ort_static,
    torch_dynamic,
    w8a8,
)

if TYPE_CHECKING:
    import torch

LoadFn = Callable[..., "tuple[torch.nn.Module, QuantizationRecord]"]


@dataclass(frozen=True)
class QuantMethod:
    """A registered method: its name, parameter schema and loader."""

    name: str
    summary: str
    params_model: type[BaseModel]
    load: LoadFn
    backends: tuple[str, ...] = ("inprocess",)  # backends that apply this method
    devices: tuple[str, ...] = ("cpu", "cuda")
    # Methods of graph backends (onnx, openvino): (parent graph, params, DeriveContext)
    # -> the derived graph (``quantize/derive.py``); None for the in-process methods.
    derive: Callable[..., Any] | None = None

    def allowed_fields(self) -> str:
        fields = self.params_model.model_fields
        if not fields:
            return "(no parameters)"
        return ", ".join(f"{n}: {_type_text(f.annotation)}" for n, f in fields.items())


def _type_text(annotation: Any) -> str:
    """``Literal[8, 4] | None`` -> ``8|4|null``: what a recipe author can type."""
    import types
    import typing

    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return "|".join(str(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return "|".join("null" if a is type(None) else _type_text(a)
                        for a in typing.get_args(annotation))
    return getattr(annotation, "__name__", str(annotation))


METHODS: dict[str, QuantMethod] = {}


def register(method: QuantMethod) -> QuantMethod:
    """Add a method to the registry; a second registration of a name is refused."""
    if method.name in METHODS:
        raise ValueError(f"quantization method '{method.name}' is already registered")
    METHODS[method.name] = method
    return method


for _module in (dtype, bnb, torch_dynamic, w8a8, ort_dynamic, ort_static, ort_optimize,
                nncf_int8):
    register(QuantMethod(_module.NAME, _module.SUMMARY, _module.Params, _module.load,
                         backends=_module.BACKENDS, devices=_module.DEVICES,
                         derive=getattr(_module, "derive", None)))


def get_method(method: str, *, file: str | Path | None = None,
               line: int | None = None) -> QuantMethod:
    try:
        return METHODS[method]
    except KeyError:
        raise InputError(
            message=f"unknown quantization method '{method}'",
            file=file, line=line, field="quantization.method",
            fix=f"use one of: {', '.join(METHODS)}",
        ) from None


def validate_quantization(method: str, params: Mapping[str, Any], *,
                          file: str | Path | None = None,
                          line: int | None = None) -> BaseModel:
    """Parsed parameters of ``method`` (``params`` without the ``method`` key).

    Raises :class:`InputError` naming the offending field and listing the method's
    allowed fields, or the registered methods when ``method`` is unknown.
    """
    spec = get_method(method, file=file, line=line)
    try:
        return spec.params_model.model_validate(dict(params))
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        detail = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            detail = f"'{loc}' is not a parameter of {method}"
        return_field = f"quantization.{loc}" if loc else "quantization"
        own_fix = (err.get("ctx") or {}).get("fix")  # a check that knows the fix says it
        raise InputError(
            message=f"{detail} (method {method})",
            file=file, line=line, field=return_field,
            fix=own_fix or f"{method} accepts {spec.allowed_fields()}",
        ) from exc


def split_spec(quantization: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``{"method": m, **params}`` (a recipe's ``quantization:``) -> ``(m, params)``."""
    params = dict(quantization)
    method = params.pop("method", None)
    if not isinstance(method, str):
        raise InputError(
            message="quantization needs a 'method'", field="quantization.method",
            fix=f"use one of: {', '.join(METHODS)}",
        )
    return method, params


def load_model(model_path: Path, *, dtype: str = "float32",
               quantization: Mapping[str, Any] | None = None,
               device: str = "cpu") -> tuple[torch.nn.Module, QuantizationRecord]:
    """Build the model a variant describes: a dtype cast, or a quantization method."""
    if quantization is None:
        params = validate_quantization("dtype", {"dtype": dtype})
        return METHODS["dtype"].load(model_path, params, device)
    method, raw = split_spec(quantization)
    params = validate_quantization(method, raw)
    return METHODS[method].load(model_path, params, device, dtype)


__all__ = [
    "METHODS",
    "QuantMethod",
    "get_method",
    "load_model",
    "register",
    "split_spec",
    "validate_quantization",
    "w8a8_checkpoint",
]


def w8a8_checkpoint(quantization: dict[str, Any], model_path: Path,
                    cache_dir: Path) -> w8a8.W8A8Checkpoint:
    """The checkpoint a recipe variant's ``quantization: {method: w8a8-int8, ...}`` names
    (parameters validated here, so embedding and reranker variants read them alike)."""
    raw = {k: v for k, v in quantization.items() if k != "method"}
    params = validate_quantization(w8a8.NAME, raw)
    assert isinstance(params, w8a8.Params)
    return w8a8.quantize_w8a8(model_path, cache_dir=cache_dir, scheme=params.scheme,
                              targets=params.targets, ignore=params.ignore)
