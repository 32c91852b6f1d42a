"""Scoring pairs with a reranker: dedup, score cache, token-budget batches, timing.

The same packing as embeddings (``encode.pack_batches``): pairs sorted by token length,
longest first, cut into batches whose padded size stays within ``batch_tokens``. Pairs
are scored in chunks; each finished chunk is committed to the score cache at once, so an
interrupted pipeline resumes at the last chunk. Rerankers that batch themselves (the
bi-encoder scorer embeds unique texts, HTTP servers schedule their own batches) get the
whole chunk in one call.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evalq.backends.context import RerankerContext
from evalq.backends.registry import reranker_backend
from evalq.backends.reranker import Reranker
from evalq.encode import length_order, pack_batches
from evalq.errors import InputError
from evalq.pipeline_config import RerankerSpec, RerankerVariant
from evalq.scorecache import ScoreCache, pair_key

DEFAULT_BATCH_TOKENS = {"cpu": 2048, "cuda": 16384}


@dataclass(frozen=True)
class ScoreStats:
    pairs: int
    unique_pairs: int
    cached: int
    computed: int
    seconds_computing: float
    pairs_per_s: float | None
    tokens_computed: int
    padded_tokens: int
    batches: int
    forward_calls: int


def score_pairs(reranker: Reranker, queries: Sequence[str], documents: Sequence[str], *,
                cache: ScoreCache | None = None, batch_tokens: int = 2048,
                max_batch: int = 256, chunk_size: int = 2048,
                self_batching: bool = False) -> tuple[np.ndarray, ScoreStats]:
    """float64 scores of ``(queries[i], documents[i])`` and how they were obtained."""
    if len(queries) != len(documents):
        raise ValueError(f"{len(queries)} queries for {len(documents)} documents")
    fingerprint = reranker.fingerprint()
    position: dict[tuple[str, str], int] = {}
    inverse = np.fromiter((position.setdefault(p, len(position))
                           for p in zip(queries, documents)), dtype=np.int64,
                          count=len(queries))
    unique = list(position)
    keys = [pair_key(fingerprint, q, d) for q, d in unique]
    scores = np.full(len(unique), np.nan)
    found = cache.get_many(keys) if cache is not None else {}
    missing = [i for i, k in enumerate(keys) if k not in found]
    for i, k in enumerate(keys):
        if k in found:
            scores[i] = found[k]
    seconds, tokens, padded, batches = 0.0, 0, 0, 0
    calls_before = int(getattr(reranker, "forward_calls", 0))
    if missing:
        lengths = reranker.pair_lengths([unique[i][0] for i in missing],
                                        [unique[i][1] for i in missing])
        texts = [unique[i][0] + "\x00" + unique[i][1] for i in missing]
        order = [missing[j] for j in length_order(texts, lengths)]
        length_of = dict(zip(missing, lengths))
        for start in range(0, len(order), chunk_size):
            chunk = order[start:start + chunk_size]
            chunk_lengths = [length_of[i] for i in chunk]
            spans = ([(0, len(chunk))] if self_batching else
                     pack_batches(chunk_lengths, batch_tokens=batch_tokens, max_batch=max_batch))
            for lo, hi in spans:
                part = chunk[lo:hi]
                began = time.perf_counter()
                out = np.asarray(reranker.score([unique[i][0] for i in part],
                                                [unique[i][1] for i in part]), dtype=np.float64)
                seconds += time.perf_counter() - began
                if out.shape != (len(part),):
                    raise InputError(
                        message=f"the reranker returned {out.size} scores for {len(part)} pairs",
                        field="reranker", fix="check the server's /rerank answer; every text "
                        "sent must come back with a score")
                if not np.isfinite(out).all():  # a server's fault, or a broken checkpoint
                    raise InputError(
                        message=f"the reranker returned NaN or infinite scores for "
                        f"{int((~np.isfinite(out)).sum())} of {len(part)} pairs",
                        field="reranker", fix="check the server's /rerank answer or the "
                        "checkpoint's head; pairs already scored are cached for the rerun")
                scores[part] = out
                batches += 1
                tokens += sum(chunk_lengths[lo:hi])
                padded += (hi - lo) * max(chunk_lengths[lo:hi])
            if cache is not None:
                cache.put_many((keys[i], scores[i]) for i in chunk)
    computed = len(missing)
    stats = ScoreStats(
        pairs=len(queries), unique_pairs=len(unique), cached=len(unique) - computed,
        computed=computed, seconds_computing=seconds,
        pairs_per_s=computed / seconds if computed and seconds > 0 else None,
        tokens_computed=tokens, padded_tokens=padded, batches=batches,
        forward_calls=int(getattr(reranker, "forward_calls", 0)) - calls_before)
    return scores[inverse], stats


def resolve_reranker_model(spec: str, cache_dir: Path, recipe_path: Path, field: str) -> Path:
    from evalq.modelinfo import resolve_model_path
    from evalq.rerank_fixture import is_fixture, resolve_fixture

    if is_fixture(spec):
        return resolve_fixture(spec, cache_dir, field=field)
    base = recipe_path.resolve().parent
    candidate = (base / spec) if not Path(spec).is_absolute() else Path(spec)
    if candidate.exists():
        spec = str(candidate)
    return resolve_model_path(spec, file=recipe_path, field=field)


def build_reranker(spec: RerankerSpec, variant: RerankerVariant, model_path: Path,
                   device: str, logs_dir: Path | None = None,
                   cache_dir: Path | None = None) -> tuple[Reranker, int, bool]:
    """The reranker a variant names (built by its backend's declared builder), its batch
    token budget, and whether it batches itself.

    ``cache_dir`` holds the W8A8 checkpoints a vllm variant's ``quantization: {method:
    w8a8-int8}`` makes (``<cache_dir>/checkpoints``, the embedding variants' place too).
    """
    tokens = variant.batch_tokens or DEFAULT_BATCH_TOKENS.get(device, 2048)
    backend = reranker_backend(variant.backend)
    ctx = RerankerContext(spec=spec, variant=variant, model_path=model_path, device=device,
                          batch_tokens=tokens, logs_dir=logs_dir, cache_dir=cache_dir)
    return backend.build(ctx), tokens, backend.batches_itself(spec.kind)


def describe_stats(stats: ScoreStats) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(stats)
