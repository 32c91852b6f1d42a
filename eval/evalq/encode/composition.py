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

Each backend declares its behaviour, and that of the quantization methods it applies,
in its spec (``BackendSpec.batch_dependence``: ``backends/inprocess.py``,
``backends/vllm_build.py``; HTTP servers are unverified), and
``tests/encode/test_composition.py`` checks every declaration by encoding the same real texts
in two batch compositions. What follows from a declaration:

- the embedding cache key of a batch-dependent (or unverified) encoder includes what
  decided the composition (:func:`cache_composition`), so a run with other batching
  recomputes instead of reusing vectors made under the old one;
- ``batch_sensitivity:`` (:mod:`evalq.execute.sensitivity`) re-encodes those candidates under
  several compositions and gates on the worst.

A new method or backend without a declaration gets "unverified" ("no declaration for
..."), which ``tests/encode/test_composition.py`` refuses (it enumerates the registries).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalq.engines.options import EncoderVariant
from evalq.engines.registry import BACKENDS, embedding_backend
from evalq.engines.spec import NEAR_INVARIANT_TOLERANCE, BatchDependence, Level

__all__ = ["NEAR_INVARIANT_TOLERANCE", "BatchDependence", "Level", "cache_composition",
           "declared_dependence", "reranker_batch_dependent"]


def declared_dependence(variant: EncoderVariant) -> BatchDependence:
    """The declaration that applies to ``variant`` (backend, dtype, quantization): its
    backend's spec decides."""
    declare = embedding_backend(variant.backend).batch_dependence
    if declare is None:
        method = (variant.quantization or {}).get("method")
        return BatchDependence("unverified", f"no declaration for backend "
                               f"{variant.backend!r} with quantization {method!r}", None)
    return declare(variant)


def cache_composition(variant: EncoderVariant) -> Mapping[str, Any] | None:
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


def reranker_batch_dependent(variant: Any) -> bool:
    """Whether a reranker variant's scores depend on which pairs share a batch evalq packs,
    so the score cache must key them by the batching (``score_pairs(batch_dependent=)``).

    An in-process, ONNX or OpenVINO cross-encoder applies the quantization methods of the
    embedding backend of its name, whose declaration says (torch and ORT dynamic int8 set
    one activation scale per batch). A server or engine schedules its own batches, which
    no recipe setting of evalq's decides; nothing is declared for them here."""
    reranker = BACKENDS.get("reranker", variant.backend)
    encoder = BACKENDS.get("embedding", variant.backend)
    if (reranker is None or reranker.serving != "in-process" or encoder is None
            or encoder.batch_dependence is None):
        return False
    return encoder.batch_dependence(variant).batch_dependent
