"""The backends evalq knows: one table of the modules that declare a backend spec.

Adding a backend is one module that declares ``SPEC`` (``backends/spec.py``) plus its
line here; the recipe's allowed ``backend:`` values, ``evalq init --backend``, the plan's
checks, capability, Ray, load-test and HTTP-probe support all read :data:`BACKENDS`.
The table is explicit (no import for side effects), and registering a name twice is
refused. Importing it imports no torch or vLLM: the builders do that when they build.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic_core import PydanticCustomError

from evalq.engines import (
    inprocess,
    onnx_backend,
    onnx_rerank,
    openai_http,
    openvino_backend,
    openvino_rerank,
    rerank_http,
    reranker,
    tei_http,
    vllm_build,
    vllm_rerank,
)
from evalq.engines.spec import BackendRegistry, BackendSpec, Kind, or_list

BACKENDS = BackendRegistry()

for _spec in (inprocess.SPEC, vllm_build.SPEC, openai_http.SPEC, tei_http.SPEC,
              reranker.SPEC, vllm_rerank.SPEC, rerank_http.TEI_SPEC,
              rerank_http.RERANK_API_SPEC, onnx_backend.SPEC,
              openvino_backend.SPEC, onnx_rerank.SPEC, openvino_rerank.SPEC):
    BACKENDS.register(_spec)


def register_backend(spec: BackendSpec) -> BackendSpec:
    """Add a backend (a plug-in's, a test's); a second registration of a name is refused."""
    return BACKENDS.register(spec)


def embedding_backend(name: str) -> BackendSpec:
    """The embedding backend a parsed recipe names (the recipe allows registered names
    only, so a miss is evalq's bug)."""
    spec = BACKENDS.get("embedding", name)
    if spec is None:
        raise KeyError(f"no embedding backend '{name}' is registered")
    return spec


def reranker_backend(name: str) -> BackendSpec:
    spec = BACKENDS.get("reranker", name)
    if spec is None:
        raise KeyError(f"no reranker backend '{name}' is registered")
    return spec


def allowed_backend(kind: Kind, value: Any) -> str:
    """A recipe's ``backend:`` must name a registered backend of ``kind``. Refused in
    pydantic's Literal wording ("Input should be 'inprocess', 'vllm', 'openai' or
    'tei'"), so the names come from the registry and the message is what a Literal
    gave."""
    names = BACKENDS.names(kind)
    if value not in names:
        expected = or_list([repr(n) for n in names], "or")
        raise PydanticCustomError("literal_error", "Input should be {expected}",
                                  {"expected": expected})
    return str(value)


def backend_enum(kind: Kind) -> Callable[[dict[str, Any]], None]:
    """``json_schema_extra`` for a ``backend:`` field: the registered names as its enum,
    read when the schema is made."""
    def extra(schema: dict[str, Any]) -> None:
        schema["enum"] = list(BACKENDS.names(kind))
    return extra


def options_misplaced(kind: Kind, backend: str, given: dict[str, object]) -> str | None:
    """The recipe error of a variant whose backend options do not fit its backend
    (missing required ones, or another backend's), or None. ``given`` maps each options
    key of ``kind`` to the variant's value for it."""
    spec = BACKENDS.get(kind, backend)
    if spec is not None and spec.options_required and given.get(spec.options_key or "") is None:
        return f"backend '{backend}' needs '{spec.options_key}: {{url: ...}}'"
    for key in BACKENDS.option_keys(kind):
        if given.get(key) is not None and (spec is None or spec.options_key != key):
            users = BACKENDS.names(kind, lambda s, key=key: s.options_key == key)
            word = "backends" if len(users) > 1 else "backend"
            return f"'{key}' options apply to {word} {or_list(users)} only"
    return None


__all__ = ["BACKENDS", "allowed_backend", "backend_enum", "embedding_backend", "options_misplaced",
           "register_backend", "reranker_backend"]
