"""A search's combinations, derived from one encoding of each weight variant (issue 31).

``evalq run`` encodes every variant once (:mod:`evalq.execute.evaluate`). When a variant
is one of ``search.weights``, its full-width float vectors are still in memory right after
its own scoring, and every combination of that weight variant is derived from them there:
truncated to the combination's Matryoshka width (:func:`evalq.encode.matryoshka.truncate`),
quantized as it stores them (:mod:`evalq.retrieve.vectorquant`, rescored as it says),
searched exactly or through its index kind (the registry), and measured against qrels
and against the reference's run. Its recall@10 against the exact float search of the
same vectors at the same width (computed once per width, or taken from the grid's own
exact float combination) says what its index or its codes lose before any gate looks.
Nothing is encoded again: the search costs one encoding per weight variant and dataset,
which the run spends anyway.

Each combination's run and per-query values are written under its name
(``s.<weights>.<vectors>.<dims>``) like a variant's, so the decision
(:mod:`evalq.execute.search_decide`) reads them back from the folder; what it cost (index
bytes, the weight variant's bytes and encode rates) goes to the manifest, in the weight
variant's dataset entry under ``search``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from evalq.core.errors import InputError
from evalq.core.ranking import Ranking
from evalq.core.values import PerQuery
from evalq.decide.summary_stats import align
from evalq.encode.matryoshka import common_dims, truncate
from evalq.execute.dataset_scoring import ReferenceState, run_index
from evalq.measure.judged import evaluate as evaluate_qrels
from evalq.measure.reference import evaluate_reference, vector_agreement
from evalq.measure.registry import parse_measures
from evalq.plan.run import RunSections
from evalq.plan.search import Combination, SearchPlan, check_dims, check_split
from evalq.results.folder import RunFolder
from evalq.retrieve.exact import ExactOptions
from evalq.retrieve.kinds import Documents, Queries, recall_at
from evalq.retrieve.vectorquant import VectorSpec, quantize_documents

RECALL_AT = 10  # a combination's recall against exact search: at the gates' usual cut


@dataclass(frozen=True)
class Derived:
    """One combination's searched form on one dataset: its run's cost facts."""

    dims: int
    index_bytes: int
    bytes_per_vector: int
    search_s: float
    recall_at_10: float  # against the exact float search at ``dims``


def search_weight(search: SearchPlan, sections: RunSections, weights: str, ds: Any,
                  doc_vectors: np.ndarray, query_vectors: np.ndarray, depth: int,
                  folder: RunFolder, reference: ReferenceState, judged: Any
                  ) -> dict[str, Any]:
    """Every combination of ``weights`` on dataset ``ds``, from its full-width vectors:
    runs and per-query values written, the manifest entry returned (per combination:
    dims, index bytes and how they were counted, search seconds)."""
    width = int(doc_vectors.shape[1])
    check_dims(search.section, width)  # the plan checked when the model's config said
    began = time.perf_counter()
    combos: dict[str, Any] = {}
    exact: dict[int, Ranking] = {}  # per width: the exact float search, found or run once
    for combo in search.of_weights(weights):
        derived = _derive(combo, sections, ds, (doc_vectors, query_vectors), depth, folder,
                          reference, judged, exact)
        combos[combo.name] = {"dims": derived.dims, "model_dim": width,
                              "vectors": combo.vectors.label, "index": combo.index_label,
                              "index_bytes": derived.index_bytes,
                              "bytes_per_vector": derived.bytes_per_vector,
                              "search_s": derived.search_s,
                              "recall_at_10": derived.recall_at_10}
    return {"combinations": combos, "seconds": time.perf_counter() - began,
            "index_bytes_counted": "codes of every document at the combination's width "
            "(int8: plus the 2 × dims float32 ranges); rescoring reads the stored codes, "
            "so no float copy is kept"}


def _derive(combo: Combination, sections: RunSections, ds: Any,
            vectors: tuple[np.ndarray, np.ndarray], depth: int, folder: RunFolder,
            reference: ReferenceState, judged: Any, exact: dict[int, Ranking]) -> Derived:
    """One combination searched, measured and written (``vectors``: the weight variant's
    full-width documents and queries; ``exact``: the exact float runs per width)."""
    doc_vectors, query_vectors = vectors
    docs, queries = doc_vectors, query_vectors
    dims = int(doc_vectors.shape[1]) if combo.dims is None else combo.dims
    if dims != doc_vectors.shape[1]:
        docs, queries = truncate(doc_vectors, dims), truncate(query_vectors, dims)
    spec = VectorSpec(quantize=combo.vectors.quantize, rescore=combo.vectors.rescore)
    stored = quantize_documents(docs, spec) if spec.quantize != "none" else None
    index_bytes = int(stored.nbytes) if stored is not None else int(docs.nbytes)
    if spec.quantize == "int8":
        index_bytes += 2 * 4 * dims  # the per-dimension ranges kept once per index
    query_in = Queries(ds.queries.ids, queries)
    t0 = time.perf_counter()
    if combo.index is None:
        ranking = run_index(ExactOptions(), Documents(ds.corpus.ids, docs, stored=stored),
                            query_in, depth, where=f"search.{combo.name}").ranking
    else:
        indexed = run_index(combo.index, Documents(ds.corpus.ids, docs), query_in, depth,
                            where="search.index")
        ranking = indexed.ranking
        index_bytes = int(indexed.stats.bytes) or index_bytes  # what the kind holds
    search_s = time.perf_counter() - t0
    if combo.index is None and stored is None:
        exact[dims] = ranking  # this combination is the exact float search at its width
    elif dims not in exact:
        exact[dims] = run_index(ExactOptions(), Documents(ds.corpus.ids, docs), query_in,
                                depth, where=f"search.{combo.name}").ranking
    recall = float(np.mean(recall_at(ranking, exact[dims], RECALL_AT)))
    folder.write_run(ds.name, combo.name, ranking)
    qrels_values = evaluate_qrels(ranking, judged, parse_measures(sections.metrics))
    q_agree = vector_agreement(*common_dims(reference.query_vectors, queries),
                               list(ds.queries.ids))
    ref_values = evaluate_reference(ranking, reference.ranking,
                                    parse_measures(sections.reference_metrics),
                                    query_agreement=q_agree)
    values = dict(qrels_values.values)
    values.update(align(ref_values, qrels_values.query_ids))
    folder.write_per_query(ds.name, combo.name, PerQuery(qrels_values.query_ids, values))
    return Derived(dims, index_bytes, spec.bytes_per_vector(dims), search_s, recall)


def refuse_short_split(search: SearchPlan, queries: int, dataset: str) -> None:
    """The run's own check of the split, with the dataset's real query count (the plan
    checked ``max_queries``, which a smaller dataset does not reach)."""
    try:
        check_split(search.section, queries)
    except InputError as exc:
        raise InputError(message=f"dataset {dataset}: {exc.message}", field=exc.field,
                         fix=exc.fix) from None
