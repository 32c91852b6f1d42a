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

from evalq.backends.base import QuantizationRecord
from evalq.backends.reranker import Reranker, RerankSettings
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


def rerank_settings(spec: RerankerSpec, model_path: Path) -> RerankSettings:
    from evalq.modelinfo import default_settings

    max_length = spec.max_length or default_settings(model_path).max_length
    return RerankSettings(activation=spec.activation, label=spec.label, max_length=max_length,
                          truncation=spec.truncation)


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
    """The reranker a variant names, its batch token budget, and whether it batches itself.

    ``cache_dir`` holds the W8A8 checkpoints a vllm variant's ``quantization: {method:
    w8a8-int8}`` makes (``<cache_dir>/checkpoints``, the embedding variants' place too).
    """
    tokens = variant.batch_tokens or DEFAULT_BATCH_TOKENS.get(device, 2048)
    if variant.backend == "vllm":
        served, record = _vllm_checkpoint(variant, model_path, cache_dir)
        if variant.vllm and variant.vllm.mode == "server":
            return (_vllm_server_reranker(spec, variant, model_path, served, record, logs_dir),
                    tokens, True)
        from evalq.backends.vllm_rerank import VllmEngineReranker

        opts = variant.vllm
        return (VllmEngineReranker(
            served, settings=rerank_settings(spec, model_path), kind=spec.kind,
            dtype=variant.dtype, quantization=opts.quantization if opts else None,
            gpu_memory_utilization=opts.gpu_memory_utilization if opts else 0.1,
            enforce_eager=opts.enforce_eager if opts else None,
            extra_engine_args=opts.engine_args if opts else None, record=record),
            tokens, True)
    if variant.backend != "inprocess":
        from evalq.backends.rerank_http import build_http_reranker

        return build_http_reranker(spec, variant, model_path), tokens, True
    if spec.kind == "bi-encoder":
        from evalq.backends.reranker import BiEncoderScorer
        from evalq.modelinfo import resolve_settings

        settings = resolve_settings(model_path, {"max_length": spec.max_length}
                                    if spec.max_length else {})
        return (BiEncoderScorer(model_path, settings=settings, dtype=variant.dtype,
                                quantization=variant.quantization, device=device,
                                batch_tokens=tokens), tokens, True)
    from evalq.backends.reranker import CrossEncoderReranker

    return (CrossEncoderReranker(model_path, settings=rerank_settings(spec, model_path),
                                 dtype=variant.dtype, quantization=variant.quantization,
                                 device=device), tokens, False)


def _vllm_checkpoint(variant: RerankerVariant, model_path: Path, cache_dir: Path | None,
                     ) -> tuple[Path, QuantizationRecord | None]:
    """What vLLM loads for a vllm variant: the model itself, or its W8A8 int8 checkpoint
    (made once by llm-compressor, cached by weight fingerprint, head kept in float; see
    ``quantize.w8a8``) with the record of what was done."""
    if variant.quantization is None:
        return model_path, None
    from evalq.quantize import w8a8_checkpoint
    from evalq.quantize.w8a8 import NAME

    if variant.quantization["method"] != NAME:  # the recipe check refuses this first
        raise InputError(message=f"backend vllm applies quantization method {NAME} only, "
                         f"not '{variant.quantization['method']}'",
                         field="reranker.quantization.method",
                         fix=f"use method: {NAME}, or vllm: {{quantization: ...}}")
    ckpt = w8a8_checkpoint(variant.quantization, model_path,
                          (cache_dir or Path(".evalq-cache")) / "checkpoints")
    return ckpt.path, ckpt.record


def _vllm_server_reranker(spec: RerankerSpec, variant: RerankerVariant, model_path: Path,
                          served: Path, record: QuantizationRecord | None,
                          logs_dir: Path | None) -> Reranker:
    from evalq.backends.vllm_rerank_server import VllmServerReranker

    opts = variant.vllm
    assert opts is not None
    encoding = None
    if spec.kind == "bi-encoder":
        from evalq.modelinfo import resolve_settings

        encoding = resolve_settings(model_path, {"max_length": spec.max_length}
                                    if spec.max_length else {})
    settings = rerank_settings(spec, model_path)
    if encoding is not None:  # the bi-encoder truncates each text at its own max length
        from dataclasses import replace

        settings = replace(settings, max_length=encoding.max_length)
    extra = [f"--{k.replace('_', '-')}={v}" for k, v in opts.engine_args.items()]
    return VllmServerReranker(
        served, settings=settings, record=record, kind=spec.kind, encoding=encoding,
        log_dir=logs_dir or Path(".evalq-cache") / "logs", route=opts.route,
        dtype=variant.dtype, quantization=opts.quantization,
        gpu_memory_utilization=opts.gpu_memory_utilization,
        enforce_eager=opts.enforce_eager, startup_timeout_s=opts.startup_timeout_s,
        max_batch=opts.max_batch, extra_args=extra)


def describe_stats(stats: ScoreStats) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(stats)
