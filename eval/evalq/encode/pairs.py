"""Scoring pairs with a reranker: dedup, score cache, token-budget batches, timing.

The same packing as embeddings (``encode.pack_batches``): pairs sorted by token length,
longest first, cut into batches whose padded size stays within ``batch_tokens``. Pairs
are scored in chunks; each finished chunk is committed to the score cache at once, so an
interrupted pipeline resumes at the last chunk. Rerankers that batch themselves (the
bi-encoder scorer embeds unique texts, HTTP servers schedule their own batches) get the
whole chunk in one call.

The bi-encoder scorer's embeddings go through the run's embedding cache like every other
embedding (:class:`CachedEmbeddings`). When it is batch-invariant and its encoder is one a
dense variant already encoded the dataset with (the usual case: the reranker is the dense
reference's model and settings), it asks for exactly what that variant encoded, so every
chunk is one the dense stage wrote and no document is encoded twice.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.encodestats import EncodeStats
from evalq.core.errors import InputError
from evalq.encode.batching import encode_texts, length_order, pack_batches
from evalq.encode.cache import EmbeddingCache
from evalq.encode.composition import cache_composition
from evalq.encode.scorecache import ScoreCache, pair_key
from evalq.engines.context import RerankerContext
from evalq.engines.modelinfo import resolve_model_path
from evalq.engines.options import EncoderVariant, RerankerModel, RerankerVariantOptions
from evalq.engines.quantize.derive import CalibrationSource
from evalq.engines.registry import reranker_backend
from evalq.engines.rerank_fixture import is_fixture, resolve_fixture
from evalq.engines.reranker import Reranker

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
                self_batching: bool = False,
                batch_dependent: bool = False) -> tuple[np.ndarray, ScoreStats]:
    """float64 scores of ``(queries[i], documents[i])`` and how they were obtained.

    ``batch_dependent`` (``composition.reranker_batch_dependent``): the reranker's scores
    depend on which pairs share a batch, so the cache keys them by the batching too; a
    rerun with other batching scores again instead of serving scores it would not make."""
    if len(queries) != len(documents):
        raise ValueError(f"{len(queries)} queries for {len(documents)} documents")
    fingerprint = reranker.fingerprint()
    if batch_dependent:
        fingerprint += "|batching:" + json.dumps(
            {"batch_tokens": batch_tokens, "max_batch": max_batch, "chunk_size": chunk_size,
             "self_batching": self_batching}, sort_keys=True)
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


# The bi-encoder scorer's texts per encode_texts call and batch cap: encode_texts'
# defaults, which it always used (and the dense stage's in-process batch cap).
_SCORER_CHUNK, _SCORER_MAX_BATCH = 512, 256


@dataclass(frozen=True)
class DenseLayout:
    """One dataset's texts as the run's dense stage encoded them (``role`` -> texts, in
    its order, cut into ``chunk_size`` chunks), and the encoder fingerprints of the
    batch-invariant dense variants that did: their chunks are keyed by encoder and texts
    alone."""

    texts: Mapping[str, Sequence[str]]
    chunk_size: int
    fingerprints: frozenset[str]


def dense_layout(variants: Sequence[EncoderVariant], variant_records: Mapping[str, Any],
                 dataset: Any, title_separator: str | None, chunk_size: int) -> DenseLayout:
    """The layout of ``dataset`` that this run's dense ``variants`` (``variant_records``,
    the manifest's entries) encoded through the embedding cache, in chunks of
    ``chunk_size`` texts, titles joined with ``title_separator``."""
    fingerprints = set()
    for variant in variants:
        record = variant_records.get(variant.name) or {}
        fingerprint = record.get("backend", {}).get("fingerprint")
        if fingerprint is not None and cache_composition(variant) is None:
            fingerprints.add(fingerprint)
    texts = {"document": dataset.corpus.texts_for_encoding(title_separator),
             "query": list(dataset.queries.texts)}
    return DenseLayout(texts, chunk_size, frozenset(fingerprints))


class CachedEmbeddings:
    """The bi-encoder scorer's embeddings (:class:`evalq.engines.reranker.Embeddings`),
    through the run's embedding cache.

    A batch-invariant scorer whose encoder is a dense variant's (same fingerprint: weights,
    quantization, settings, device, versions) encodes that variant's whole layout for the
    role: the same texts in the same chunks give the same keys, so every chunk is a cache
    hit and nothing is computed. Without a cache it computes that layout itself, so its
    scores never depend on the cache. Any other scorer encodes the texts it is asked for,
    as it always did, and caches them under their own keys; a batch-dependent one keeps
    its own batches (its vectors depend on them) and keys them by its batching.
    """

    def __init__(self, cache: EmbeddingCache | None, *, batch_tokens: int,
                 composition: Mapping[str, Any] | Callable[[], Mapping[str, Any] | None]
                 | None,
                 layout: DenseLayout | None) -> None:
        self.cache, self.batch_tokens, self.layout = cache, batch_tokens, layout
        self._composition = composition
        self.calls: list[EncodeStats] = []  # each encode_texts call's counts, in order

    @cached_property
    def composition(self) -> Mapping[str, Any] | None:
        """What keys this scorer's chunks besides texts (``cache_composition``), worked
        out when it first embeds: only a builder that embeds through the run's cache asks."""
        given = self._composition
        return given() if callable(given) else given

    def shares_layout(self, encoder: Any) -> bool:
        return (self.layout is not None and self.composition is None
                and encoder.fingerprint() in self.layout.fingerprints)

    def __call__(self, encoder: Any, role: str, texts: Sequence[str]
                 ) -> Mapping[str, np.ndarray]:
        if self.layout is None or not self.shares_layout(encoder):
            return self._encode(encoder, role, texts, _SCORER_CHUNK)
        out = self._encode(encoder, role, self.layout.texts[role], self.layout.chunk_size)
        missing = [t for t in texts if t not in out]  # not the dataset's: encoded alone
        return {**out, **self._encode(encoder, role, missing, _SCORER_CHUNK)} if missing \
            else out

    def _encode(self, encoder: Any, role: str, texts: Sequence[str], chunk_size: int
                ) -> dict[str, np.ndarray]:
        encoded = encode_texts(encoder, texts, role=role,  # type: ignore[arg-type]
                               batch_tokens=self.batch_tokens, max_batch=_SCORER_MAX_BATCH,
                               cache=self.cache, progress=False, chunk_size=chunk_size,
                               composition=self.composition)
        self.calls.append(encoded.stats)
        return dict(zip(texts, encoded.vectors))


def resolve_reranker_model(spec: str, cache_dir: Path, recipe_path: Path, field: str) -> Path:
    if is_fixture(spec):
        return resolve_fixture(spec, cache_dir, field=field)
    base = recipe_path.resolve().parent
    candidate = (base / spec) if not Path(spec).is_absolute() else Path(spec)
    if candidate.exists():
        spec = str(candidate)
    return resolve_model_path(spec, file=recipe_path, field=field)


def build_reranker(spec: RerankerModel, variant: RerankerVariantOptions, model_path: Path,
                   device: str, logs_dir: Path | None = None,
                   cache_dir: Path | None = None, embedding_cache: EmbeddingCache | None = None,
                   layout: DenseLayout | None = None,
                   calibration: CalibrationSource | None = None,
                   ) -> tuple[Reranker, int, bool]:
    """The reranker a variant names (built by its backend's declared builder), its batch
    token budget, and whether it batches itself.

    ``cache_dir`` holds the W8A8 checkpoints a vllm variant's ``quantization: {method:
    w8a8-int8}`` makes (``<cache_dir>/checkpoints``, the embedding variants' place too).
    An in-process bi-encoder scorer embeds through ``embedding_cache`` and reuses the
    dense stage's chunks where ``layout`` says they are its own (:class:`CachedEmbeddings`).
    ``calibration`` draws the corpus documents a static int8 graph reranker
    (``ort-static-int8``, ``nncf-int8``) makes its calibration pairs from.
    """
    tokens = variant.batch_tokens or DEFAULT_BATCH_TOKENS.get(device, 2048)
    backend = reranker_backend(variant.backend)
    # Batch-dependent variants key their chunks by batching, as dense variants do (a
    # reranker variant carries the backend, dtype and quantization it is judged by). Asked
    # lazily: only the in-process bi-encoder scorer embeds; a served or graph reranker's
    # backend (tei, rerank-api, onnx, ...) declares no embedding composition, and asking
    # for one ended every such run in a KeyError (issue 32).
    embeddings = CachedEmbeddings(
        embedding_cache, batch_tokens=tokens, layout=layout,
        composition=lambda: cache_composition(variant))  # type: ignore[arg-type]
    ctx = RerankerContext(spec=spec, variant=variant, model_path=model_path, device=device,
                          batch_tokens=tokens, logs_dir=logs_dir, cache_dir=cache_dir,
                          embeddings=embeddings, calibration=calibration)
    return backend.build(ctx), tokens, backend.batches_itself(spec.kind)


def describe_stats(stats: ScoreStats) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(stats)
