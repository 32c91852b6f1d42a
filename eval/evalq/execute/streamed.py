"""`evalq run` on a streamed corpus: encode block by block into shards, search the shards.

A dataset with ``stream:`` (:mod:`evalq.data.streamed`) never holds its texts or its
document matrix. For each variant the runner calls, in order:

* :func:`encode_corpus`: every block of ``block_rows`` texts goes through
  :func:`evalq.encode.batching.encode_texts` with the run's cache (so a crash or Ctrl-C resumes per
  cache chunk, as a loaded corpus does) and is appended to ``.npy`` shards of
  ``shard_rows`` rows (:mod:`evalq.data.vectors`); freed heap pages are handed back after
  each block (:func:`evalq.data.streaming.return_freed_memory`);
* :func:`search`: exact search over the memory-mapped shards with a top-k merge in
  trec_eval's order (:mod:`evalq.retrieve.shards`): the same run as one flat index;
* :func:`document_agreement` (candidates): per-document cosine against the reference's
  shards, one shard pair at a time.

Shards live in the run folder (``shards/<dataset>/<variant>``); a candidate's are deleted
once it is scored, the reference's when the run finishes, since the embedding cache holds
the same vectors. What stays in memory is the ids, one block, one shard and the
``queries × depth`` top-k lists.

A batch-dependent variant (dynamic int8, bitsandbytes) sees other batch compositions
here than on a loaded corpus, since batches are packed within a block: its vectors, and
so its cache entries, can differ from a loaded run's in the last digits. Batch-invariant
ones (float32) give the same metrics (tested).
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.encodestats import EncodeStats
from evalq.core.names import inside
from evalq.core.ranking import Ranking
from evalq.data.streamed import StreamedCorpus
from evalq.data.streaming import return_freed_memory
from evalq.data.vectors import ShardWriter, open_shards, release_pages
from evalq.encode.batching import encode_texts
from evalq.measure.reference import VectorAgreement, vector_agreement
from evalq.retrieve.shards import search_shards

log = logging.getLogger(__name__)

# Called with each block's texts before it is encoded (the Ray executor fills the cache).
BlockHook = Callable[[list[str]], None]


@dataclass(frozen=True)
class ShardedDocuments:
    """One variant's document vectors on disk, and what encoding them cost."""

    root: Path
    stats: EncodeStats
    nbytes: int
    shards: int
    blocks: int


def shards_root(run_root: Path, dataset: str, variant: str) -> Path:
    return inside(run_root, "shards", dataset, variant)


def encode_corpus(encoder: Any, corpus: StreamedCorpus, root: Path, *,
                  title_separator: str | None, options: dict[str, Any], progress: bool,
                  before_block: BlockHook | None = None) -> ShardedDocuments:
    """Encode ``corpus`` block by block into shards under ``root`` (emptied first: a
    rerun rewrites them, from the cache)."""
    shutil.rmtree(root, ignore_errors=True)
    writer = ShardWriter(root, shard_rows=corpus.options.shard_rows)
    total: EncodeStats | None = None
    done = blocks = 0
    for block in corpus.blocks(title_separator):
        if before_block is not None:
            before_block(block.texts)
        encoded = encode_texts(encoder, block.texts, role="document", progress=False,
                               **options)
        writer.append(encoded.vectors)
        total = encoded.stats if total is None else add_stats(total, encoded.stats)
        done += len(block.ids)
        blocks += 1
        del encoded, block
        return_freed_memory()
        if progress:
            log.info(f"[evalq]   {done:,}/{len(corpus):,} documents encoded")
    layout = writer.close()
    assert total is not None  # a streamed corpus has at least one document
    return ShardedDocuments(root, total, nbytes=layout.total * layout.dim * 4,
                            shards=len(layout.files), blocks=blocks)


def add_stats(a: EncodeStats, b: EncodeStats) -> EncodeStats:
    """Two blocks' encoding counts as one. ``n_unique`` adds up, so a text repeated in two
    blocks counts twice there (it is embedded once per block)."""
    summed = {f: getattr(a, f) + getattr(b, f) for f in EncodeStats.model_fields
              if f not in ("texts_per_s", "tokens_per_s")}
    rate = summed["seconds_computing"] > 0 and summed["n_computed"] > 0
    seconds = summed["seconds_computing"]
    return EncodeStats(**summed,
                       texts_per_s=summed["n_computed"] / seconds if rate else None,
                       tokens_per_s=summed["tokens_computed"] / seconds if rate else None)


def search(query_vectors: np.ndarray, docs: ShardedDocuments, doc_ids: tuple[str, ...],
           query_ids: tuple[str, ...], depth: int) -> Ranking:
    """Exact top-``depth`` over the shards: the same run as one flat index."""

    _, shards = open_shards(docs.root)
    return search_shards(query_vectors, shards, doc_ids, query_ids, depth)


def document_agreement(reference: Path, candidate: Path,
                       ids: tuple[str, ...]) -> VectorAgreement:
    """Per-document cosine between two variants' shards of the same corpus, one shard
    pair at a time (both were cut at the same ``shard_rows``)."""

    ref_layout, ref_shards = open_shards(reference)
    cand_layout, cand_shards = open_shards(candidate)
    if ref_layout.rows != cand_layout.rows:
        raise ValueError(f"shards of {reference} and {candidate} are cut differently: "
                         f"{ref_layout.rows} vs {cand_layout.rows}")
    parts: list[VectorAgreement] = []
    start = 0
    for ref, cand, rows in zip(ref_shards, cand_shards, ref_layout.rows):
        parts.append(vector_agreement(ref, cand, ids[start:start + rows]))
        release_pages(ref)
        release_pages(cand)
        start += rows
    joined = {f: sum(getattr(p, f) for p in parts)
              for f in ("candidate_nan", "candidate_inf", "reference_nonfinite")}
    return VectorAgreement(ids, np.concatenate([p.cosine for p in parts]), **joined)


def ray_block_hook(ray_exec: Any, variant: Any, ctx: Any, encoder: Any,
                   options: dict[str, Any], totals: dict[str, Any]) -> BlockHook:
    """The Ray executor computes a block's missing cache chunks on its actors; the local
    :func:`encode_texts` then reads them from the cache. ``totals`` sums its counts."""
    def hook(texts: list[str]) -> None:
        stats = ray_exec.encode_variant(variant, ctx, encoder, [(texts, "document")], options)
        for key, value in stats.items():
            totals[key] = totals.get(key, 0) + value
    return hook
