"""One variant's part of the plan: what serves it, on which device, with which quantization,
which model folder and settings it encodes with, and what keys its cache.

Each check adds what it finds to a :class:`Problems`, the collector every plan check
writes to; it lives here because the variant checks are the ones that tell a problem of
this machine (no CUDA GPU, a model not in the local cache, a GPU too old for a dtype) from
a problem of the recipe: the first is an error for ``evalq run`` and ``evalq validate
--here``, and only a note for a plain ``evalq validate``. :mod:`evalq.recipe.plan`
assembles the :class:`~evalq.recipe.plan.VariantPlan` from what these return.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from evalq.core.errors import InputError
from evalq.core.weights import check_weight_files, model_fingerprint
from evalq.engines.capability import DeviceInfo, check_capability
from evalq.engines.lasttoken import eos_problem
from evalq.engines.modelinfo import (
    ModelNotCachedError,
    embedding_dim,
    resolve_model_path,
    resolve_settings,
)
from evalq.engines.registry import BACKENDS
from evalq.engines.spec import SERVER_CACHE_KEY


class Problems:
    """Collects problems with their recipe lines."""

    def __init__(self, file: Path, located: Any, machine: bool = True) -> None:
        self.file, self.located = file, located
        self.items: list[InputError] = []
        self.machine = machine
        self.notes: list[str] = []
        # (file, line, field, message, fix) -> (index in items, prefixes): add_error's merge
        self.shared: dict[tuple[Any, ...], tuple[int, list[str]]] = {}

    def machine_problem(self, path: tuple[Any, ...], message: str, fix: str) -> None:
        """A problem of this machine: an error for a run, a note for a validation."""
        if self.machine:
            self.add(path, message, fix)
        else:
            self.notes.append(f"{message} ({'.'.join(map(str, path))}; on this machine)")

    def add(self, path: tuple[Any, ...], message: str, fix: str, field: str | None = None,
            ) -> None:
        where_file, line = (self.located.where(path) if self.located is not None
                            else (None, None))
        self.items.append(InputError(message=message, file=where_file or self.file, line=line,
                                     field=field or ".".join(map(str, path)) or None,
                                     fix=fix))

    def add_error(self, path: tuple[Any, ...], exc: InputError, prefix: str = "") -> None:
        """Adds ``exc`` at ``path``, its message after ``prefix`` (whose variant it is).
        The same problem of several variants (one ``model.path`` they share) is one item
        naming them all, not one per variant."""
        where_file, line = (self.located.where(path) if self.located is not None
                            else (None, None))
        exc_field = exc.field or ""
        dotted = ".".join(map(str, path))
        if path and str(path[-1]) == exc_field:  # the caller's path names the field already
            exc_field = ""
        item = InputError(
            message=prefix + exc.message, file=exc.file or where_file or self.file,
            line=exc.line or line,
            field=(f"{dotted}.{exc_field}" if exc_field and not exc_field.startswith(dotted)
                   else exc_field or dotted) or None,
            fix=exc.fix)
        key = (str(item.file), item.line, item.field, exc.message, item.fix)
        shared = self.shared.get(key) if prefix else None
        if shared is None:
            if prefix:
                self.shared[key] = (len(self.items), [prefix])
            self.items.append(item)
            return
        index, prefixes = shared
        prefixes.append(prefix)
        item.message = _joined(prefixes) + exc.message
        self.items[index] = item


def _joined(prefixes: list[str]) -> str:
    """``"variant 'a': "`` and ``"variant 'b': "`` as ``"variants 'a', 'b': "``."""
    labels = [p.removesuffix(": ") for p in prefixes]
    if all(label.startswith("variant ") for label in labels):
        return "variants " + ", ".join(label.removeprefix("variant ") for label in labels) + ": "
    return "; ".join(labels) + ": "


def check_serving(recipe: Any, variant: Any, vpath: tuple[Any, ...], label: str,
                  support: Any, device_info: Any, problems: Problems) -> tuple[str, str]:
    """The backend exists and serves the model's kind; a local one the variant's dtype on a
    device this machine has, a remote one no setting evalq would ignore. Returns the
    resolved device and its name ("remote", "server" for a server)."""
    device, device_name = "remote", "server"
    if support is None:
        problems.add((*vpath, "backend"), f"{label}: unknown backend '{variant.backend}'",
                     f"use one of {', '.join(BACKENDS.names('embedding'))}")
    elif support.local:
        device, device_name = _check_local(variant, vpath, label, support, device_info,
                                           problems)
    else:
        _check_remote(variant, vpath, label, problems)
    if support is not None and recipe.model.kind not in support.model_kinds:
        problems.add(("model", "kind"), f"{label}: backend {variant.backend} does not serve "
                     f"{recipe.model.kind} models", f"use a backend serving {recipe.model.kind}")
    return device, device_name


def _check_local(variant: Any, vpath: tuple[Any, ...], label: str, support: Any,
                 device_info: Any, problems: Problems) -> tuple[str, str]:
    if "cuda" not in support.devices:  # a CPU engine runs on the CPU whatever GPU is here
        device_info = DeviceInfo("cpu")
        if variant.device == "cuda":
            problems.add((*vpath, "device"), f"{label}: backend {variant.backend} runs on "
                         "the CPU only", "use device: cpu or auto for this variant")
    assert device_info is not None
    if variant.device == "cuda" and device_info.kind != "cuda":
        problems.machine_problem((*vpath, "device"),
                     f"{label} asks for device cuda, but this machine has no CUDA GPU "
                     "(torch sees none)",
                     "use device: cpu or auto for this variant, or run on a GPU machine")
    device = device_info.kind if variant.device == "auto" else variant.device
    device_name = device_info.name if device == device_info.kind else device
    if variant.dtype not in support.dtypes:
        problems.add((*vpath, "dtype"), f"{label}: backend {variant.backend} does not "
                     f"serve dtype {variant.dtype}", f"use one of {', '.join(support.dtypes)}")
    vllm_quant = variant.vllm.quantization if variant.vllm else None
    if device == device_info.kind:  # capability of a device we can see
        try:
            check_capability(variant.backend, device, vllm_quant, variant.dtype,
                             compute_capability=device_info.compute_capability,
                             symmetric_int8=(variant.quantization or {}).get("method")
                             == "w8a8-int8", model_path=variant.model)
        except InputError as exc:
            key = (*vpath, "vllm" if exc.field == "quantization" else exc.field or "backend")
            if problems.machine:
                problems.add_error(key, exc, prefix=f"{label}: ")
            else:
                problems.machine_problem(key, f"{label}: {exc.message}", exc.fix or "")
    return device, device_name


def _check_remote(variant: Any, vpath: tuple[Any, ...], label: str,
                  problems: Problems) -> None:
    """A remote server fixed its dtype and device when it started."""
    if variant.dtype != "float32" or variant.device != "auto":
        problems.add((*vpath, "dtype" if variant.dtype != "float32" else "device"),
                     f"{label}: backend {variant.backend} talks to a running server, "
                     "whose dtype and device were chosen where it started; evalq would "
                     "silently ignore this setting",
                     "remove dtype/device from this variant (start the server with them)")
    if variant.http and variant.http.api_key_env:
        value = os.environ.get(variant.http.api_key_env)
        if not value:
            problems.add((*vpath, "http", "api_key_env"),
                         f"{label}: the API key environment variable "
                         f"'{variant.http.api_key_env}' is not set or empty",
                         f"export {variant.http.api_key_env}=... before running")


def check_quantization(variant: Any, vpath: tuple[Any, ...], label: str, support: Any,
                       device: str, methods: Any,
                       problems: Problems) -> dict[str, Any] | None:
    """The variant's quantization (method + params) when its method is known; a problem
    when its backend or device does not apply it (an unknown method is the schema's)."""
    if variant.quantization is None:
        return None
    method = variant.quantization.get("method")
    spec = methods.get(method)
    if spec is None:
        return None
    if variant.backend not in spec.backends:
        where = ("served by a running server, whose quantization is chosen where "
                 "it starts" if support is not None and support.quantized_by == "server"
                 else f"not applied by backend {variant.backend}")
        ok = [m for m, s in methods.items() if variant.backend in s.backends
              and m != "dtype"]
        fix = (f"on backend {variant.backend} use one of {', '.join(ok)}" if ok else
               "remove quantization from this variant")
        fix += f"; {method} runs on backend {' or '.join(spec.backends)}"
        if support is not None and support.quantized_by == "engine":
            fix += " (vLLM's own methods go in vllm: {quantization: ...})"
        problems.add((*vpath, "quantization", "method"),
                     f"{label}: quantization method '{method}' is {where}; it would "
                     "be ignored or fail after the reference has encoded", fix)
    elif device != "remote" and device not in spec.devices:
        problems.add((*vpath, "quantization", "method"),
                     f"{label}: quantization method '{method}' runs on "
                     f"{' or '.join(spec.devices)}, not {device}",
                     f"use device: {spec.devices[0]} for this variant")
    return dict(variant.quantization)


def resolve_model(recipe: Any, variant: Any, vpath: tuple[Any, ...], label: str,
                  problems: Problems,
                  ) -> tuple[str | None, str | None, dict[str, Any] | None]:
    """The model folder, its weights fingerprint and the encoding settings (model defaults
    + recipe overrides); None for what could not be resolved, and a problem saying why."""
    model_path = fingerprint = None
    settings = None
    spec_text = variant.model or recipe.model.path
    try:
        resolved = resolve_model_path(spec_text)
        model_path = str(resolved)
        fingerprint = model_fingerprint(resolved)
        check_weight_files(resolved)
        merged = recipe.encoding.merged(variant.encoding)
        resolved_settings = resolve_settings(resolved, merged.model_dump(exclude_none=True))
        settings = resolved_settings.as_dict()
        eos = eos_problem(resolved, resolved_settings, served=variant_sends_texts(variant))
        if eos is not None:
            problems.add((*vpath, "encoding", "append_eos"), f"{label}: {eos}",
                         "remove append_eos, or use a model whose tokenizer appends (or at "
                         "least defines) eos_token; vllm mode engine appends it to token ids")
        check_dims(variant, vpath, label, embedding_dim(resolved), problems)
    except InputError as exc:
        key = (*vpath, "model") if variant.model else ("model", "path")
        if exc.field and exc.field not in ("model.path",):
            key = (*vpath, "encoding", exc.field)
        exc.file = exc.line = None
        exc.field = ".".join(map(str, key))
        if isinstance(exc, ModelNotCachedError):  # this machine's problem, not the recipe's
            problems.machine_problem(key, f"{label}: {exc.message}", exc.fix or "")
        else:
            problems.add_error(key, exc, prefix=f"{label}: ")
    return model_path, fingerprint, settings


def variant_sends_texts(variant: Any) -> bool:
    """Whether the variant hands texts (not token ids) to a server that tokenizes them."""
    return variant.http is not None or (variant.vllm is not None
                                        and variant.vllm.mode == "server")


def check_dims(variant: Any, vpath: tuple[Any, ...], label: str, model_dim: int | None,
               problems: Problems) -> None:
    """Matryoshka ``vectors.dims`` within the model's width (the schema refuses <= 0), and
    an index its kind can build at the width searched."""
    dims = variant.vectors.dims
    if dims is not None and model_dim is not None and dims > model_dim:
        problems.add((*vpath, "vectors", "dims"),
                     f"{label}: vectors.dims {dims} exceeds the model's {model_dim} "
                     "dimensions", f"use vectors.dims between 1 and {model_dim}")
    asked = variant.http.dimensions if variant.http is not None else None
    if dims is not None and asked is not None and asked != dims:
        problems.add((*vpath, "http", "dimensions"),
                     f"{label}: http.dimensions {asked} and vectors.dims {dims} disagree",
                     "keep vectors.dims only: evalq sends it to the server as `dimensions`")
    width = dims or model_dim
    if variant.searches_index and variant.index is not None and width is not None:
        try:
            variant.index.check_width(width, "index")
        except InputError as exc:
            problems.add((*vpath, *(exc.field or "index").split(".")),
                         f"{label}: {exc.message}", exc.fix or "")


def variant_endpoint(variant: Any) -> str | None:
    """The URL of the server the variant talks to, if any."""
    if variant.http is not None:
        return variant.http.url
    if variant.vllm is not None and variant.vllm.url:
        return variant.vllm.url
    return None


def cache_text(support: Any, endpoint: str | None, use_cache: bool) -> str:
    """What keys the variant's cache chunks."""
    if not use_cache:
        return "nothing (--no-cache)"
    if endpoint is not None or support is None:
        return SERVER_CACHE_KEY
    return support.cache_key  # what the backend declares
