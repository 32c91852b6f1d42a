"""The vectors ``evalq load``'s database stage searches with: the variant's documents
and queries of the recipe's first dataset, encoded before any traffic, so the model is
never in the measured loop.

They are encoded as ``evalq run`` encodes them (the same engine, settings, batching and
cache chunks), so after a run with the cache on they come straight from the embedding
cache, and the documents' vectors give the same key (:mod:`evalq.retrieve.keyed`): the
database stage finds the table or shard that run built and searches it as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from evalq.data.manifest import load_datasets
from evalq.encode.batching import encode_texts
from evalq.encode.cache import EmbeddingCache
from evalq.encode.composition import cache_composition
from evalq.encode.matryoshka import truncate
from evalq.engines.context import BuildContext
from evalq.engines.factory import batching, create_encoder, resolve_device
from evalq.execute.calibration_sample import corpus_calibration
from evalq.plan.types import Plan, VariantPlan


@dataclass(frozen=True)
class StageVectors:
    dataset: str
    doc_ids: tuple[str, ...]
    documents: np.ndarray
    query_ids: tuple[str, ...]
    queries: np.ndarray
    cached: bool  # the embedding cache was on (a run before filled it)


def stage_vectors(vp: VariantPlan, resolved: Plan) -> StageVectors:
    """``vp``'s document and query vectors of the first dataset (Matryoshka ``dims``
    applied, as the run's search applies them)."""
    datasets = load_datasets(list(resolved.dataset_specs), resolved.recipe_file,
                             resolved.limits.max_queries, resolved.limits.max_docs)
    ds = datasets[0]
    variant = vp.options
    ctx = BuildContext(vp.model_folder(), vp.encoding_settings(),
                       resolved.work_dir / "logs", resolve_device(variant.device),
                       resolved.work_dir, corpus_calibration(datasets,
                                                             resolved.title_separator))
    cut = batching(variant, resolved.batch_tokens, ctx.device)
    cache = (EmbeddingCache(resolved.cache_dir / "embeddings")
             if resolved.cache_dir is not None else None)
    options: dict[str, Any] = {"batch_tokens": cut.batch_tokens, "max_batch": cut.max_batch,
               "length_sorted": cut.length_sorted, "cache": cache,
               "chunk_size": resolved.limits.cache_chunk, "progress": False,
               "composition": cache_composition(variant)}
    encoder = create_encoder(variant, ctx)
    try:
        docs = encode_texts(encoder, ds.corpus.texts_for_encoding(resolved.title_separator),
                            role="document", **options).vectors
        queries = encode_texts(encoder, list(ds.queries.texts), role="query",
                               **options).vectors
    finally:
        encoder.close()
    dims = variant.vectors.dims
    if dims is not None:
        docs, queries = truncate(docs, dims), truncate(queries, dims)
    return StageVectors(ds.name, tuple(ds.corpus.ids), np.ascontiguousarray(docs),
                        tuple(ds.queries.ids), np.ascontiguousarray(queries),
                        cache is not None)
