"""Batch composition: does a text's vector depend on which texts share its batch?

A served model batches by load, so which neighbours a text gets in production is an
accident; an evaluation's batching is an equally arbitrary choice. For most encoders
that is harmless: fp32 with padding and masked attention gives a text the same vector in
any batch, up to the rounding of differently-shaped matmuls. Some quantization methods
are different by construction:

- bitsandbytes LLM.int8() picks its fp16 *outlier columns per batch* (any column where
  some token of the batch exceeds the threshold), so a text's neighbours decide which of
  its features take the int8 path;
- torch's dynamic int8 scales activations *per tensor*: one scale for the whole batch,
  set by its largest activation.

Each backend and quantization method declares its behaviour here, and
``tests/test_composition.py`` checks every declaration by encoding the same real texts
in two batch compositions. What follows from a declaration:

- the embedding cache key of a batch-dependent (or unverified) encoder includes what
  decided the composition (:func:`cache_composition`), so a run with other batching
  recomputes instead of reusing vectors made under the old one;
- ``batch_sensitivity:`` (:mod:`evalq.sensitivity`) re-encodes those candidates under
  several compositions and gates on the worst.

Declarations live in one table rather than in each method module so that a new method
without one fails ``tests/test_composition.py`` (it enumerates the registries).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from evalq.config import Variant

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


_PADDED_FLOAT = BatchDependence(
    "near-invariant",
    "masked attention and per-text pooling: neighbours only change padding, so only the "
    "rounding of differently shaped matmuls differs", NEAR_INVARIANT_TOLERANCE)
_PADDED_HALF = BatchDependence(
    "near-invariant",
    "16-bit weights, same masked arithmetic as float32: neighbours change padding only", 1e-2)
_LLM_INT8 = BatchDependence(
    "dependent",
    "LLM.int8() keeps in fp16 every activation column where any token of the batch "
    "exceeds the outlier threshold: the batch decides which columns are int8", None)
_WEIGHT_ONLY_4BIT = BatchDependence(
    "near-invariant",
    "4-bit weights dequantized per block, activations left in the compute dtype: nothing "
    "is computed across the texts of a batch", NEAR_INVARIANT_TOLERANCE)
_TORCH_DYNAMIC = BatchDependence(
    "dependent",
    "torch dynamic int8 scales activations per tensor: one scale per batch, set by the "
    "batch's largest activation", None)
_VLLM_FLOAT = BatchDependence(
    "near-invariant",
    "vLLM packs sequences without padding and attends per sequence; neighbours change only "
    "the shape of the token matmuls", NEAR_INVARIANT_TOLERANCE)
_VLLM_W8A8 = BatchDependence(
    "near-invariant",
    "W8A8 int8 quantizes activations per token (dynamic): a token's scale is its own, "
    "whatever shares the batch", NEAR_INVARIANT_TOLERANCE)
_VLLM_OTHER = BatchDependence(
    "unverified",
    "a vLLM quantization this machine cannot run (GPU only), so its behaviour was not "
    "measured; fp8 with dynamic per-tensor scales is batch-dependent", None)
_REMOTE = BatchDependence(
    "unverified",
    "a remote server batches concurrent requests as it likes; evalq controls only how it "
    "groups its own requests", None)


def declared_dependence(variant: Variant) -> BatchDependence:
    """The declaration that applies to ``variant`` (backend, dtype, quantization)."""
    quant = variant.quantization or {}
    method = quant.get("method")
    if variant.backend == "inprocess":
        if method is None or method == "dtype":
            dtype = quant.get("dtype", variant.dtype) if method == "dtype" else variant.dtype
            return _PADDED_FLOAT if dtype == "float32" else _PADDED_HALF
        if method == "bitsandbytes":
            return _LLM_INT8 if quant.get("bits") == 8 else _WEIGHT_ONLY_4BIT
        if method == "torch-dynamic-int8":
            return _TORCH_DYNAMIC
    elif variant.backend == "vllm":
        engine_quant = variant.vllm.quantization if variant.vllm else None
        if engine_quant is not None:
            return _VLLM_OTHER
        if method == "w8a8-int8":
            return _VLLM_W8A8
        if method is None and variant.dtype == "float32":
            return _VLLM_FLOAT
        if method is None:
            return _PADDED_HALF
    elif variant.backend in ("openai", "tei"):
        return _REMOTE
    return BatchDependence("unverified", f"no declaration for backend {variant.backend!r} "
                           f"with quantization {method!r}", None)


def cache_composition(variant: Variant) -> Mapping[str, Any] | None:
    """What besides budget, ``max_batch`` and order decides a batch-dependent variant's
    composition (``encode_texts(composition=...)``); ``None`` for invariant variants, whose
    cache chunks are shared across batch settings.

    For engines and servers that schedule their own batches, the scheduler's options
    (engine arguments, concurrency, request size) decide which texts meet.
    """
    if not declared_dependence(variant).batch_dependent:
        return None
    out: dict[str, Any] = {"backend": variant.backend}
    if variant.vllm is not None:
        out["vllm"] = {"mode": variant.vllm.mode, "engine_args": variant.vllm.engine_args,
                       "concurrency": variant.vllm.concurrency,
                       "max_batch": variant.vllm.max_batch}
    if variant.http is not None:
        out["http"] = {"concurrency": variant.http.concurrency,
                       "max_batch": variant.http.max_batch}
    return out
