"""Batch sensitivity, the measurement: re-encode a batch-dependent candidate's slice under
each composition and score it like the run (:func:`evalq.execute.dataset_scoring.score_dataset`).

Deciding the gates on what was measured, and the console view of it, stay in
:mod:`evalq.execute.sensitivity`, which the summary reads; this module is the one that
encodes, so the summary never imports the encoder.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from evalq.core.values import PerQuery
from evalq.data.slicing import slice_dataset
from evalq.encode.batching import Encoded, encode_texts
from evalq.encode.composition import cache_composition, declared_dependence
from evalq.execute.borrowed import Borrowed
from evalq.execute.dataset_scoring import ReferenceState, VariantRecord, score_dataset
from evalq.execute.sensitivity import between_compositions, compositions, stored_name
from evalq.measure.judged import JudgedIndex
from evalq.measure.judged import evaluate as evaluate_qrels
from evalq.measure.registry import parse_measures
from evalq.retrieve.search import search

if TYPE_CHECKING:
    from evalq.plan.run import RunSections
    from evalq.plan.variant import SearchedVariant
    from evalq.results.folder import RunFolder


def measure_dataset(
    sections: RunSections, variant: SearchedVariant, encoder: Any, ds: Any, reference: Any,
    folder: RunFolder, options: Mapping[str, Any], depth: int, show_progress: bool,
    run_docs: Any, run_queries: Any,
) -> dict[str, Any]:
    """Re-encode ``variant`` on the slice of ``ds`` under every composition and score each.

    ``reference`` is the run's ``ReferenceState`` for ``ds``; ``options`` the run's
    ``encode_texts`` options for this variant; ``run_docs`` / ``run_queries`` the run's
    own ``Encoded`` vectors, whose slice rows *are* the as-run composition (nothing is
    re-encoded for it). Returns the manifest entry that :func:`apply_sensitivity` later
    turns into summary figures and verdicts.
    """

    opts = sections.batch_sensitivity
    assert opts is not None
    began = time.perf_counter()
    sub = slice_dataset(ds, opts.max_queries, opts.max_docs)
    judged = JudgedIndex.build(sub.qrels, sub.corpus.ids)
    # The reference on the slice: its run vectors, re-searched over the sliced corpus.
    q_rows = _rows(ds.queries.ids, sub.queries.ids)
    d_rows = _rows(ds.corpus.ids, sub.corpus.ids)
    ref_q, ref_d = reference.query_vectors[q_rows], reference.doc_vectors[d_rows]
    ref_ranking = search(ref_q, ref_d, doc_ids=list(sub.corpus.ids),
                         query_ids=list(sub.queries.ids), depth=depth)
    ref_values = evaluate_qrels(ref_ranking, judged, parse_measures(sections.metrics))
    ref_name = stored_name(sections.reference, "slice")
    folder.write_per_query(sub.name, ref_name,
                           PerQuery(ref_values.query_ids, dict(ref_values.values)))
    slice_reference = {sub.name: ReferenceState(ref_ranking, ref_q, ref_d)}

    # Always keyed by composition here, even for a variant declared invariant and named
    # explicitly: each composition must really be computed, never read from another's.
    key = dict(cache_composition(variant) or {"backend": variant.backend})
    entries, stacks = [], []
    doc_texts = sub.corpus.texts_for_encoding(sections.title_separator)
    # A side the variant borrows (issue 31: int8 queries against the fp32 index) is the
    # lender's under every composition; only the side it encodes is re-encoded.
    kept_docs = _borrowed_rows(run_docs, d_rows)
    kept_queries = _borrowed_rows(run_queries, q_rows)
    for comp in compositions(opts, int(options["batch_tokens"])):
        t0 = time.perf_counter()
        if comp.id == "as-run":
            docs = kept_docs or Encoded(run_docs.vectors[d_rows], run_docs.stats)
            queries = kept_queries or Encoded(run_queries.vectors[q_rows], run_queries.stats)
        else:
            kwargs = {**options, "batch_tokens": comp.batch_tokens,
                      "shuffle_seed": comp.shuffle_seed, "composition": key}
            docs = kept_docs or encode_texts(encoder, doc_texts, role="document",
                                             progress=show_progress, **kwargs)
            queries = kept_queries or encode_texts(encoder, list(sub.queries.texts),
                                                   role="query", progress=show_progress,
                                                   **kwargs)
        name = stored_name(variant.name, comp.id)
        record = VariantRecord(name=name, role="candidate", description={},
                               settings=encoder.settings)
        score_dataset(sections, variant.model_copy(update={"name": name}), "candidate", sub,
                       docs, queries, depth, folder, slice_reference, judged, record)
        scored = record.datasets[sub.name]
        encoded = [e for e in (queries, docs) if isinstance(e, Encoded)]
        entries.append({**comp.as_dict(), "stored_as": name,
                        "seconds": time.perf_counter() - t0,
                        "reused_from_run": comp.id == "as-run",
                        "computed_texts": 0 if comp.id == "as-run" else
                        sum(e.stats.n_computed for e in encoded),
                        "vectors": scored.get("vectors")})
        # Between compositions: the encoded sides only (a borrowed side never moves).
        stacks.append(np.vstack([e.vectors for e in encoded]))
    return {
        "dependence": declared_dependence(variant).as_dict(),
        "slice": {"max_queries": opts.max_queries, "max_docs": opts.max_docs,
                  "queries": len(sub.queries), "documents": len(sub.corpus)},
        "reference_stored_as": ref_name,
        "compositions": entries,
        "between_compositions": between_compositions(stacks),
        "seconds": time.perf_counter() - began,
    }


def _borrowed_rows(side: Any, rows: np.ndarray) -> Borrowed | None:
    """A borrowed side's slice rows, still marked borrowed (None for an encoded side)."""
    if not isinstance(side, Borrowed):
        return None
    return Borrowed(side.vectors[rows], side.source, side.probe)


def _rows(all_ids: Sequence[str], kept: Sequence[str]) -> np.ndarray:
    position = {x: i for i, x in enumerate(all_ids)}
    return np.asarray([position[x] for x in kept], dtype=np.int64)
