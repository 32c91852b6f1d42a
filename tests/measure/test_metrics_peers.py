"""Qrels measures per query against two more implementations: ir_measures and ranx.

pytrec_eval (trec_eval semantics, ties included) is the oracle in test_metrics_judged.py.
The peers here are compared on hypothesis-generated runs **without tied scores**: their
tie rules differ from trec_eval's (trec_eval orders equal scores by document id,
descending; ir_measures truncates a run to k before sorting for RR@k; ranx keeps numba's
sort order), so on ties they legitimately disagree with trec_eval and with each other.
Relevance levels are 0..3 (trec_eval gains are the level itself: nDCG with linear gain,
ranx's ``ndcg``, not ``ndcg_burges``).
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalq.core.dataset import Qrels
from evalq.measure.judged import evaluate_dict
from evalq.measure.measures import parse_measures

DOCS = [f"d{i}" for i in range(14)]
QUERIES = [f"q{i}" for i in range(6)]
NAMES = ["nDCG@10", "nDCG@3", "R@5", "R@20", "P@5", "RR@10", "AP@10"]


@st.composite
def tie_free_cases(draw):
    qrels_queries = draw(st.lists(st.sampled_from(QUERIES), unique=True, min_size=1,
                                  max_size=len(QUERIES)))
    qrels = {}
    for q in qrels_queries:
        judged = draw(st.dictionaries(st.sampled_from(DOCS), st.integers(0, 3), min_size=1,
                                      max_size=8))
        if not any(judged.values()):
            # a query without a relevant document: ranx and trec_eval both give 0, but
            # ranx refuses queries it has no relevant judgment for; keep one relevant
            judged[next(iter(judged))] = 1
        qrels[q] = judged
    run = {}
    for q in qrels_queries:  # ranx needs a run row for every judged query
        docs = draw(st.lists(st.sampled_from(DOCS), unique=True, min_size=1, max_size=12))
        scores = draw(st.lists(st.integers(-10_000, 10_000), unique=True,
                               min_size=len(docs), max_size=len(docs)))
        run[q] = {d: s / 100.0 for d, s in zip(docs, scores)}
    return run, qrels


def _ours(run: dict, qrels: dict) -> dict[str, dict[str, float]]:
    got = evaluate_dict(run, Qrels(qrels), parse_measures(NAMES))
    return {name: dict(zip(got.query_ids, got.values[name].tolist())) for name in NAMES}


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tie_free_cases())
def test_per_query_equals_ir_measures(case) -> None:
    ir_measures = pytest.importorskip("ir_measures")
    run, qrels = case
    peer = {"nDCG@10": ir_measures.nDCG @ 10, "nDCG@3": ir_measures.nDCG @ 3,
            "R@5": ir_measures.R @ 5, "R@20": ir_measures.R @ 20, "P@5": ir_measures.P @ 5,
            "RR@10": ir_measures.RR @ 10, "AP@10": ir_measures.AP @ 10}
    by_measure = {m: name for name, m in peer.items()}
    expected: dict[str, dict[str, float]] = {name: {} for name in NAMES}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for row in ir_measures.iter_calc(list(peer.values()), qrels, run):
            expected[by_measure[row.measure]][row.query_id] = row.value
    ours = _ours(run, qrels)
    for name in NAMES:
        for q in qrels:
            assert ours[name][q] == pytest.approx(expected[name].get(q, 0.0), abs=1e-6), \
                (name, q, run, qrels)


# ranx compiles its measures with numba on first use: minutes on a cold cache, 2 cores.
@pytest.mark.slow
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tie_free_cases())
def test_per_query_equals_ranx(case) -> None:
    ranx = pytest.importorskip("ranx")
    run, qrels = case
    peer = {"nDCG@10": "ndcg@10", "nDCG@3": "ndcg@3", "R@5": "recall@5", "R@20": "recall@20",
            "P@5": "precision@5", "RR@10": "mrr@10", "AP@10": "map@10"}
    ranx_qrels = ranx.Qrels({q: {d: r for d, r in j.items()} for q, j in qrels.items()})
    ranx_run = ranx.Run(run)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scores = ranx.evaluate(ranx_qrels, ranx_run, list(peer.values()), return_mean=False)
    order = list(ranx_qrels.keys())
    ours = _ours(run, qrels)
    for name, metric in peer.items():
        values = dict(zip(order, np.asarray(scores[metric], dtype=float).tolist()))
        for q in qrels:
            assert ours[name][q] == pytest.approx(values[q], abs=1e-6), (name, q, run, qrels)
