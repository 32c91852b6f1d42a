"""What a backend declares about itself, and the registry that holds the declarations.

Every embedding or reranker backend declares one :class:`BackendSpec` beside its code
(``SPEC`` in ``backends/inprocess.py``, ``vllm_build.py``, ``openai_http.py``, ...);
``backends/registry.py`` lists those modules and registers their specs. Everything that
used to keep its own list of backend names reads the registry instead: the recipe's
``backend:`` values, ``evalq init --backend``, the plan's device/dtype/model-kind checks,
the capability check, which backends Ray, the load test and the HTTP probe drive, and
how encoding cuts batches.

This module imports nothing of evalq, so a backend module can declare its spec without
reaching back into the recipe, the plan or the runner. Builders import their heavy
libraries (torch, vllm) when they build, never at declaration.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from evalq.core.values import FLOAT_DTYPES

Kind = Literal["embedding", "reranker"]
Serving = Literal["in-process", "engine", "http"]
# Who applies quantization: evalq's own methods (``quantize.METHODS`` name their
# backends), the engine (vLLM's ``quantization:`` and the W8A8 checkpoints evalq makes
# for it), or the server, which fixed it where it started (evalq refuses any).
QuantizedBy = Literal["evalq", "engine", "server"]

LOCAL_DEVICES = ("cpu", "cuda")

Level = Literal["bit-identical", "near-invariant", "dependent", "unverified"]

# Largest |difference| of one vector component (unit-norm vectors) that "near-invariant"
# allows between two compositions: rounding of differently shaped matmuls, not content.
NEAR_INVARIANT_TOLERANCE = 1e-6


@dataclass(frozen=True)
class BatchDependence:
    """What a variant's encoder does when the same text is batched with other texts.

    ``tolerance`` is the largest component difference between two compositions that the
    level allows (0 for bit-identical; for dependent and unverified encoders nothing is
    promised, and it is ``None``).
    """

    level: Level
    reason: str
    tolerance: float | None

    @property
    def batch_dependent(self) -> bool:
        """Whether batching must be part of the cache key and measured: dependent, or
        not verifiable here (a remote server, a GPU-only method), which is treated alike."""
        return self.level in ("dependent", "unverified")

    def as_dict(self) -> dict[str, Any]:
        return {"level": self.level, "reason": self.reason, "tolerance": self.tolerance,
                "batch_dependent": self.batch_dependent}


# What keys the embedding-cache chunks of a variant that talks to a server (``evalq plan``).
SERVER_CACHE_KEY = ("chunks keyed by URL, model, what the server reports (/v1/models or "
                    "/info) and its embedding of a probe text, settings, texts")

REMOTE_SERVER = BatchDependence(
    "unverified",
    "a remote server batches concurrent requests as it likes; evalq controls only how it "
    "groups its own requests", None)


@dataclass(frozen=True)
class BackendSpec:
    """One backend of one kind: what it serves and how it is built.

    ``build`` takes ``(variant, BuildContext)`` for an embedding backend and a
    ``RerankerContext`` for a reranker backend (``backends/context.py``).
    ``options_key``/``options_model`` name the recipe key of the backend's own options
    (``http:``, ``vllm:``) and its pydantic model; ``options_required`` says the backend
    cannot work without them. ``self_batching`` lists the model kinds for which the
    backend schedules its own batches (evalq hands it whole chunks, unsorted).
    ``batch_dependence`` (embedding backends) says whether a variant's vectors depend on
    its batch neighbours (``composition.py``). ``load_api`` is the request format a load
    test sends it (``None``: not served, nothing to load). ``aliases`` are the names its
    engines report in records and capability checks (``vllm-engine``). ``cache_key``
    says what keys its embedding-cache chunks, as ``evalq plan`` prints it.
    """

    name: str
    kind: Kind
    serving: Serving
    build: Callable[..., Any]
    quantized_by: QuantizedBy
    options_key: str | None = None
    options_model: type[Any] | None = None
    options_required: bool = False
    model_kinds: tuple[str, ...] = ("embedding",)
    devices: tuple[str, ...] = LOCAL_DEVICES
    dtypes: tuple[str, ...] = FLOAT_DTYPES
    self_batching: tuple[str, ...] = ()
    batch_dependence: Callable[[Any], BatchDependence] | None = None
    ray: bool = False
    load_api: Literal["openai", "tei"] | None = None
    http_probe: bool = False
    aliases: tuple[str, ...] = ()
    cache_key: str = SERVER_CACHE_KEY

    def __post_init__(self) -> None:
        if (self.options_key is None) != (self.options_model is None):
            raise ValueError(f"backend '{self.name}': options_key and options_model go "
                             "together")
        if self.options_required and self.options_key is None:
            raise ValueError(f"backend '{self.name}' requires options but names none")

    @property
    def local(self) -> bool:
        """Runs where evalq runs (device and dtype are evalq's to choose); an HTTP
        backend talks to a server that fixed them when it started."""
        return self.serving != "http"

    def batches_itself(self, model_kind: str) -> bool:
        return model_kind in self.self_batching


def or_list(names: tuple[str, ...] | list[str], word: str = "and") -> str:
    """``a``, ``a and b``, ``a, b and c``: names in a message."""
    names = list(names)
    if len(names) < 2:
        return "".join(names)
    return f"{', '.join(names[:-1])} {word} {names[-1]}"


class BackendRegistry:
    """Backend specs by kind and name; a second registration of a name (or alias) of a
    kind is refused, so two modules cannot silently claim the same backend."""

    def __init__(self) -> None:
        self._specs: dict[tuple[str, str], BackendSpec] = {}
        self._aliases: dict[tuple[str, str], str] = {}

    def register(self, spec: BackendSpec) -> BackendSpec:
        for name in (spec.name, *spec.aliases):
            if (spec.kind, name) in self._specs or (spec.kind, name) in self._aliases:
                raise ValueError(f"{spec.kind} backend '{name}' is already registered")
        self._specs[(spec.kind, spec.name)] = spec
        for alias in spec.aliases:
            self._aliases[(spec.kind, alias)] = spec.name
        return spec

    def unregister(self, kind: Kind, name: str) -> None:
        spec = self._specs.pop((kind, name))
        for alias in spec.aliases:
            del self._aliases[(kind, alias)]

    @contextmanager
    def added(self, spec: BackendSpec) -> Iterator[BackendSpec]:
        """Register ``spec`` for the duration of a ``with`` block (tests, plug-ins tried
        out in one process)."""
        self.register(spec)
        try:
            yield spec
        finally:
            self.unregister(spec.kind, spec.name)

    def get(self, kind: Kind, name: str) -> BackendSpec | None:
        """The spec registered under ``name`` or one of its aliases, or None."""
        spec = self._specs.get((kind, name))
        if spec is None and (kind, name) in self._aliases:
            spec = self._specs[(kind, self._aliases[(kind, name)])]
        return spec

    def specs(self, kind: Kind) -> tuple[BackendSpec, ...]:
        return tuple(s for (k, _), s in self._specs.items() if k == kind)

    def names(self, kind: Kind, where: Callable[[BackendSpec], bool] | None = None,
              ) -> tuple[str, ...]:
        """Names of ``kind`` in registration order, those ``where`` accepts if given."""
        return tuple(s.name for s in self.specs(kind) if where is None or where(s))

    def option_keys(self, kind: Kind) -> tuple[str, ...]:
        """The recipe keys of backend options of ``kind``, sorted."""
        return tuple(sorted({s.options_key for s in self.specs(kind) if s.options_key}))


__all__ = [
    "NEAR_INVARIANT_TOLERANCE",
    "REMOTE_SERVER",
    "SERVER_CACHE_KEY",
    "BackendRegistry",
    "BackendSpec",
    "BatchDependence",
    "Kind",
    "Serving",
    "or_list",
]
