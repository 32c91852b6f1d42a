"""One dataset scored for one variant: search (exact, quantized, sharded or ANN), the run
file, the measures against qrels and against the reference, and the per-query and
per-text values written to the results folder.

The evaluation loop (:mod:`evalq.execute.evaluate`) and batch sensitivity
(:mod:`evalq.execute.sensitivity_measure`) score datasets the same way, so both import it
from here (sensitivity used to reach into the runner's private helper).
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from evalq.core.ranking import Ranking
from evalq.core.values import EncodingSettings, PerQuery
from evalq.decide.summary_stats import align
from evalq.encode.matryoshka import common_dims, truncate
from evalq.execute import streamed as streamrun
from evalq.execute.borrowed import encode_record
from evalq.execute.sweep import record_sweep
from evalq.measure.judged import evaluate as evaluate_qrels
from evalq.measure.reference import evaluate_reference, vector_agreement
from evalq.measure.registry import parse_measures
from evalq.plan.run import RunSections
from evalq.plan.variant import SearchedVariant
from evalq.results.folder import RunFolder
from evalq.retrieve.exact import ExactOptions
from evalq.retrieve.kinds import (
    Documents,
    IndexProof,
    IndexStats,
    KindOptions,
    Queries,
    index_report,
)
from evalq.retrieve.registry import INDEX_KINDS
from evalq.retrieve.sweep import SweepPoint, sweep_index
from evalq.retrieve.vectorquant import VectorSpec, quantize_documents

log = logging.getLogger(__name__)


@dataclass
class ReferenceState:
    """What candidates are compared against, per dataset."""

    ranking: Ranking
    query_vectors: np.ndarray
    doc_vectors: Any  # an (n, dim) matrix, or the shards folder of a streamed corpus


@dataclass(frozen=True)
class IndexRun:
    """A variant's run through its index kind, with what the index cost and proved, and
    (when its options set ``sweep:``) the swept parameter's name and points."""

    options: KindOptions
    ranking: Ranking
    stats: IndexStats
    proof: IndexProof
    sweep: tuple[str, tuple[SweepPoint, ...]] | None = None


def run_index(options: KindOptions, docs: Documents, queries: Queries, depth: int, *,
              where: str) -> IndexRun:
    """Build ``options``' index through the registry once, search it at its own settings
    (its stats and proof are that search's), then at each swept value, and close it."""
    index = INDEX_KINDS.build(options, docs, where=where)
    try:
        ranking = index.search(queries, depth)
        note_short_rankings(ranking, min(depth, len(docs.ids)), where)
        stats, proof = index.stats(), index.proof()
        swept = sweep_index(index, options, queries, depth)
        return IndexRun(options, ranking, stats, proof, swept)
    finally:
        index.close()


def note_short_rankings(ranking: Ranking, wanted: int, where: str) -> None:
    """Say so when an index returned fewer documents than the metrics read: pgvector's
    HNSW returns at most ``ef_search`` rows and a ``bit`` index ``rerank`` rows, so a
    ``rerank: 5`` under nDCG@10 scored every query on 5 documents without a word. The
    number is what that deployment would return, so it is measured as it is; the note
    says why it is low."""
    found = (ranking.indices >= 0).sum(axis=1)
    short = int((found < wanted).sum())
    if short:
        log.info(f"[evalq] note: {where}: the index returned fewer than {wanted} "
                    f"documents for {short} of {len(found)} queries (as few as "
                    f"{int(found.min())}); the metrics count the missing ranks as misses. "
                    "Raise the index's search-time limit (pgvector ef_search / rerank, "
                    "iterative_scan) if the deployment asks for more.")


@dataclass
class VariantRecord:
    """Everything the summary needs about one variant, after its engine is closed."""

    name: str
    role: str
    description: dict[str, Any]
    settings: EncodingSettings
    timings: dict[str, Any] = field(default_factory=dict)
    datasets: dict[str, dict[str, Any]] = field(default_factory=dict)
    parity: dict[str, Any] | None = None


def score_dataset(
    sections: RunSections, variant: SearchedVariant, role: str, ds: Any, docs: Any,
    queries: Any, depth: int, folder: RunFolder, reference: dict[str, ReferenceState],
    judged: Any, record: VariantRecord,
) -> None:
    sharded = isinstance(docs, streamrun.ShardedDocuments)  # a streamed corpus
    model_dim = None
    if variant.vectors.dims is not None and not sharded:  # the plan refuses it streamed
        model_dim = int(docs.vectors.shape[1])
        docs, queries = (replace(e, vectors=truncate(e.vectors, variant.vectors.dims))
                         for e in (docs, queries))
    spec = stored = None  # the variant's quantized vectors (vectors.quantize)
    if variant.vectors.quantize != "none":
        spec = VectorSpec(quantize=variant.vectors.quantize, rescore=variant.vectors.rescore,
                          queries=variant.vectors.queries)
        stored = quantize_documents(docs.vectors, spec)
    searched = _search(variant, ds, docs, queries, depth, stored, sharded)
    ranking, search_s = searched.ranking, searched.search_s
    exact_proof, exact_ranking, indexed = searched.exact_proof, searched.exact, searched.indexed
    if exact_ranking is not None:
        folder.write_run(ds.name, f"{variant.name}.exact", exact_ranking)
    folder.write_run(ds.name, variant.name, ranking)
    qrels_values = evaluate_qrels(ranking, judged, parse_measures(sections.metrics))
    entry: dict[str, Any] = {
        "encode": encode_record(docs, queries),  # a borrowed side: its source, no counts
        "search_s": search_s,
        "documents": len(ds.corpus),
    }
    if sharded:
        entry["index"] = {"quantize": "none", "bytes": docs.nbytes}
        entry["stream"] = {"blocks": docs.blocks, "shards": docs.shards,
                           "shard_rows": ds.corpus.options.shard_rows}
        doc_vectors = docs.root
    elif spec is not None and stored is not None:
        entry["index"] = {**spec.record(docs.vectors.shape[1]), "bytes": stored.nbytes,
                          **_matryoshka(variant, model_dim)}
        # What the index holds, as floats: the drift a deployment actually sees.
        doc_vectors = stored.stored_vectors(np.arange(len(ds.corpus)))
    else:
        entry["index"] = {"quantize": "none", "dim": int(docs.vectors.shape[1]),
                          "bytes": int(docs.vectors.nbytes),
                          **_matryoshka(variant, model_dim)}
        doc_vectors = docs.vectors
    if exact_proof is not None:
        entry["index"]["proof"] = exact_proof.model_dump()
    if exact_ranking is not None and indexed is not None:
        ref_state = reference.get(ds.name)
        entry["index"] = judge_index(
            indexed, exact_ranking, judged=judged, metrics=sections.metrics,
            reference_metrics=sections.reference_metrics,
            reference_run=ref_state.ranking if ref_state else None,
            reference_values=folder.read_per_query(ds.name, sections.reference)
            if ref_state else None)
    values = dict(qrels_values.values)
    if role == "reference":
        reference[ds.name] = ReferenceState(ranking, queries.vectors, doc_vectors)
    else:
        ref = reference[ds.name]
        q_agree, d_agree = _agreement(ref, ds, queries.vectors, docs, doc_vectors, sharded)
        ref_values = evaluate_reference(ranking, ref.ranking,
                                        parse_measures(sections.reference_metrics),
                                        query_agreement=q_agree)
        values.update(align(ref_values, qrels_values.query_ids))
        folder.write_per_text(ds.name, variant.name, {
            "query": dict(zip(q_agree.ids, q_agree.cosine.tolist())),
            "document": dict(zip(d_agree.ids, d_agree.cosine.tolist())),
        })
        entry["vectors"] = {"query": asdict(q_agree.summary()),
                            "document": asdict(d_agree.summary())}
        if exact_ranking is not None:
            write_loss_views(folder, ds.name, variant.name, sections, judged, ref.ranking,
                             exact_ranking, ranking, qrels_values, q_agree)
        if exact_ranking is not None and indexed is not None and indexed.sweep is not None:
            entry["index"]["sweep"] = record_sweep(
                folder, ds.name, variant.name, sections, judged, ref.ranking, exact_ranking,
                indexed.sweep, indexed.options.configured(), q_agree)
    folder.write_per_query(ds.name, variant.name, PerQuery(qrels_values.query_ids, values))
    record.datasets[ds.name] = entry


@dataclass(frozen=True)
class _Searched:
    ranking: Ranking  # what the variant is judged on
    search_s: float  # the exact (or sharded) search's seconds
    exact_proof: IndexProof | None  # None for a streamed corpus (exact float shards)
    exact: Ranking | None = None  # the exact run, when the variant is judged on an index
    indexed: IndexRun | None = None


def _search(variant: SearchedVariant, ds: Any, docs: Any, queries: Any, depth: int, stored: Any,
            sharded: bool) -> _Searched:
    """The exact search (sharded for a streamed corpus), then the variant's index kind
    when it has one other than exact: both through the retrieval kinds' registry."""
    t0 = time.perf_counter()
    if sharded:
        ranking = streamrun.search(queries.vectors, docs, ds.corpus.ids, ds.queries.ids,
                                   depth)
        return _Searched(ranking, time.perf_counter() - t0, None)
    query_in = Queries(ds.queries.ids, queries.vectors)
    exact = run_index(ExactOptions(), Documents(ds.corpus.ids, docs.vectors, stored=stored),
                      query_in, depth, where=f"{variant.name}.vectors")
    search_s = time.perf_counter() - t0
    if not variant.searches_index or variant.index is None:
        return _Searched(exact.ranking, search_s, exact.proof)
    # judged on its run through the index; the exact one splits the loss
    indexed = run_index(variant.index, Documents(ds.corpus.ids, docs.vectors), query_in,
                        depth, where=f"candidates.{variant.name}.index")
    return _Searched(indexed.ranking, search_s, exact.proof, exact.ranking, indexed)


def _agreement(ref: ReferenceState, ds: Any, query_vectors: np.ndarray, docs: Any,
               doc_vectors: Any, sharded: bool) -> tuple[Any, Any]:
    """Per-text cosines of queries and documents against the reference's, at the narrower
    width when a side is Matryoshka-truncated (encode.matryoshka)."""
    q_agree = vector_agreement(*common_dims(ref.query_vectors, query_vectors),
                               list(ds.queries.ids))
    if sharded:  # shard by shard; this candidate's shards are not needed after
        d_agree = streamrun.document_agreement(ref.doc_vectors, docs.root, ds.corpus.ids)
        shutil.rmtree(docs.root, ignore_errors=True)
    else:
        d_agree = vector_agreement(*common_dims(ref.doc_vectors, doc_vectors),
                                   list(ds.corpus.ids))
    return q_agree, d_agree


def write_loss_views(folder: RunFolder, dataset: str, name: str, sections: RunSections,
                     judged: Any,
                     reference_run: Ranking, exact: Ranking, indexed: Ranking,
                     indexed_qrels: PerQuery, q_agree: Any) -> None:
    """The per-query values a candidate searched through an index is gated on besides its
    own (issue 30): ``<name>.exact``, its exact search (qrels measures; reference measures
    against the reference's exact run): the model's loss; ``<name>.index``, its run
    through the index (qrels measures; reference measures against its own exact run,
    cosine left out as the vectors are the same): the index's loss, paired with
    ``.exact``. Its own values (the index against the reference) are the end-to-end loss."""
    measures = parse_measures(sections.reference_metrics)
    exact_qrels = evaluate_qrels(exact, judged, parse_measures(sections.metrics))
    model = dict(exact_qrels.values)
    model.update(align(evaluate_reference(exact, reference_run, measures,
                                          query_agreement=q_agree), exact_qrels.query_ids))
    folder.write_per_query(dataset, f"{name}.exact", PerQuery(exact_qrels.query_ids, model))
    index = dict(indexed_qrels.values)
    index.update(align(evaluate_reference(indexed, exact,
                                          [m for m in measures if m.family != "cosine"]),
                       indexed_qrels.query_ids))
    folder.write_per_query(dataset, f"{name}.index", PerQuery(indexed_qrels.query_ids, index))


def _matryoshka(variant: SearchedVariant, model_dim: int | None) -> dict[str, Any]:
    """The index record's Matryoshka part: the width kept of the model's width."""
    if model_dim is None:
        return {}
    return {"matryoshka": {"dims": variant.vectors.dims, "model_dim": model_dim}}


def judge_index(
    indexed: IndexRun, exact: Ranking, *, judged: Any, metrics: Sequence[str],
    reference_metrics: Sequence[str], reference_run: Ranking | None,
    reference_values: Any | None,
) -> dict[str, Any]:
    """:func:`index_report` for a variant: each qrels metric's mean on the reference's
    exact run, this variant's exact run and its run through the index; each reference
    metric (against the reference's exact run) for the exact and the indexed run. Cosine
    measures vectors, not rankings, so it has no index loss and is skipped."""

    measures = parse_measures(list(metrics))
    exact_vals = evaluate_qrels(exact, judged, measures).values
    ann_vals = evaluate_qrels(indexed.ranking, judged, measures).values
    table: dict[str, dict[str, float | None]] = {}
    for m in measures:
        ref = None
        if reference_values is not None and m.name in reference_values.values:
            ref = float(np.mean(reference_values.values[m.name]))
        table[m.name] = {"reference": ref, "exact": float(np.mean(exact_vals[m.name])),
                         "ann": float(np.mean(ann_vals[m.name]))}
    ref_measures = [m for m in parse_measures(list(reference_metrics)) if m.family != "cosine"]
    if reference_run is not None and ref_measures:
        ex = evaluate_reference(exact, reference_run, ref_measures).values
        an = evaluate_reference(indexed.ranking, reference_run, ref_measures).values
        for m in ref_measures:
            # The reference agrees with itself perfectly: its value is the measure's top.
            table[m.name] = {"reference": None, "exact": float(np.mean(ex[m.name])),
                             "ann": float(np.mean(an[m.name]))}
    return index_report(indexed.options, indexed.stats, indexed.proof, indexed.ranking, exact,
                        table)
