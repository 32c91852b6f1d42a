"""Builds the encoder a recipe variant names, with the builder its backend declares
(``backends/registry.py``), and decides how encoding cuts its batches.

Heavy imports (torch, vllm) happen inside the builders, so a recipe that uses only the
in-process backend never imports vLLM.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from evalq.core.protocols import Encoder
from evalq.engines.context import BuildContext
from evalq.engines.options import EncoderVariant
from evalq.engines.registry import embedding_backend


def resolve_device(requested: str) -> str:
    if requested != "auto":
        return requested
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


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


def batching(variant: EncoderVariant, recipe_tokens: int | None, device: str) -> Batching:
    # Engines and servers schedule their own batches (their specs say so): evalq hands
    # them whole cache chunks in a mixed-length order. In-process encoding packs
    # length-sorted batches to a token budget itself.
    if embedding_backend(variant.backend).batches_itself("embedding"):
        return Batching(variant.batch_tokens or 1 << 30, 512, length_sorted=False)
    tokens = variant.batch_tokens or recipe_tokens or DEFAULT_BATCH_TOKENS.get(device, 2048)
    return Batching(tokens, 256, length_sorted=True)


def create_encoder(variant: EncoderVariant, ctx: BuildContext) -> Encoder:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    encoder: Encoder = embedding_backend(variant.backend).build(variant, ctx)
    return encoder
