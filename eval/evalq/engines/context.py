"""What a backend builder receives besides the variant (its own module, so builders
such as ``vllm_build`` need not import the factory that imports them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalq.core.values import EncodingSettings
from evalq.engines.tokenizer_identity import TokenizerIdentity


@dataclass(frozen=True)
class BuildContext:
    """What a builder may need beyond the variant: resolved paths and where logs go."""

    model_path: Path
    settings: EncodingSettings
    logs_dir: Path
    device: str  # "cpu" or "cuda", resolved from the variant's "auto"
    cache_dir: Path  # where derived artifacts (quantized checkpoints) are kept
    # (n, seed) -> corpus (doc id, text) pairs a static quantization calibrates on
    # (``quantize.derive``); None where the command has no corpus
    calibration: Callable[[int, int], list[tuple[str, str]]] | None = None
    # The tokenizer a certificate says AutoTokenizer resolved for the folder
    # (``evalq verify``: loaded without AutoTokenizer's imports where that still holds).
    tokenizer: TokenizerIdentity | None = None
    # (n, seed) -> the digest of the calibration documents the certificate's graph was
    # drawn with (``evalq verify``: the cached graph is found without reading the corpus)
    known_draws: Mapping[tuple[int, int], str] = field(default_factory=dict)


@dataclass(frozen=True)
class RerankerContext:
    """What a reranker builder receives: the pipeline's reranker spec (model kind,
    activation, lengths), the variant to build, and where it runs and writes.
    ``spec``/``variant`` are ``evalq.plan.pipelines.RerankerSpec``/``RerankerVariant``
    (declared on the engines' ``RerankerModel``/``RerankerVariantOptions``)."""

    spec: Any
    variant: Any
    model_path: Path
    device: str
    batch_tokens: int
    logs_dir: Path | None = None
    cache_dir: Path | None = None  # <cache_dir>/checkpoints holds W8A8 checkpoints
    # How a bi-encoder scorer gets its vectors (backends.reranker.Embeddings): the
    # encoding layer supplies one that goes through the run's embedding cache.
    embeddings: Any = None
    # (n, seed) -> corpus (doc id, text) pairs a static quantization of a graph
    # reranker makes its calibration pairs from (``pairfront``); None: no corpus
    calibration: Callable[[int, int], list[tuple[str, str]]] | None = None
