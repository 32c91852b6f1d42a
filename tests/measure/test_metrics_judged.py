"""Qrels measures against pytrec_eval (trec_eval semantics) as the oracle.

pytrec_eval crashes (segfault) on negative relevance levels, so those are tested by the
property "a negative level scores exactly like 0", which is what pytrec_eval returns on the
cases where it does not crash (checked by hand while writing evalq.measure.judged).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import pytrec_eval
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalq.core.dataset import Qrels
from evalq.core.errors import InputError
from evalq.core.ranking import Ranking
from evalq.measure.judged import JudgedIndex, evaluate, evaluate_dict
from evalq.measure.measures import parse_measure, parse_measures

# Ids of different lengths, so string order ("d10" < "d2") differs from numeric order.
DOCS = [f"d{i}" for i in range(14)]
QUERIES = [f"q{i}" for i in range(6)]
CUTOFFS = (1, 2, 3, 5, 10, 20)  # 20 is deeper than any generated run


def oracle(run: dict, qrels: dict, measure_names: list[str]) -> dict[str, dict[str, float]]:
    """Per measure, per qrels query: pytrec_eval's value (0 where it gives none)."""
    spec = {
        f"{fam}.{','.join(map(str, range(1, max(CUTOFFS) + 1)))}"
        for fam in ("ndcg_cut", "recall", "P", "map_cut")
    }
    results = pytrec_eval.RelevanceEvaluator(qrels, spec).evaluate(run)
    out: dict[str, dict[str, float]] = {}
    for name in measure_names:
        m = parse_measure(name)
        k = m.cutoff
        values = {}
        for qid in qrels:
            res = results.get(qid)
            if res is None:
                values[qid] = 0.0
                continue
            if m.family == "RR":
                # RR@k from pytrec_eval's own P@r: rank r is relevant iff hits grow there.
                hits = [round(res[f"P_{r}"] * r) for r in range(1, k + 1)]
                first = next((r for r, h in enumerate(hits, start=1) if h >= 1), None)
                values[qid] = 0.0 if first is None else 1.0 / first
            else:
                key = {"nDCG": "ndcg_cut", "R": "recall", "P": "P", "AP": "map_cut"}[m.family]
                values[qid] = res[f"{key}_{k}"]
        out[m.name] = values
    return out


ALL_MEASURES = [f"{fam}@{k}" for fam in ("nDCG", "R", "P", "RR", "AP") for k in CUTOFFS]


@st.composite
def cases(draw, negative: bool = False):
    tied = draw(st.booleans())
    score = (
        st.sampled_from([0.5, 1.0, 2.0])
        if tied
        else st.floats(-5, 5, allow_nan=False, allow_infinity=False)
    )
    run_queries = draw(st.lists(st.sampled_from(QUERIES), unique=True, max_size=len(QUERIES)))
    run = {
        q: draw(st.dictionaries(st.sampled_from(DOCS), score, min_size=1, max_size=12))
        for q in run_queries
    }
    low = -2 if negative else 0
    qrels_queries = draw(st.lists(st.sampled_from(QUERIES), unique=True, min_size=1,
                                  max_size=len(QUERIES)))
    # Graded levels; a query may judge only non-relevant documents.
    qrels = {
        q: draw(st.dictionaries(st.sampled_from(DOCS), st.integers(low, 3), min_size=1,
                                max_size=8))
        for q in qrels_queries
    }
    return run, qrels


def _check_against_oracle(run: dict, qrels: dict) -> None:
    measures = parse_measures(ALL_MEASURES)
    expected = oracle(run, qrels, ALL_MEASURES)
    from_dicts = evaluate_dict(run, Qrels(qrels), measures)
    ranking = Ranking.from_dict(run)
    from_arrays = evaluate(ranking, JudgedIndex.build(Qrels(qrels), ranking.doc_ids), measures)
    for got in (from_dicts, from_arrays):
        assert got.query_ids == tuple(qrels)
        for name, per_query in expected.items():
            want = np.array([per_query[q] for q in qrels])
            np.testing.assert_allclose(got.values[name], want, atol=1e-6, rtol=0,
                                       err_msg=f"{name} run={run} qrels={qrels}")


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_equals_pytrec_eval(case) -> None:
    run, qrels = case
    _check_against_oracle(run, qrels)


@settings(max_examples=100, deadline=None)
@given(cases(negative=True))
def test_negative_levels_score_like_zero(case) -> None:
    run, qrels = case
    zeroed = {q: {d: max(r, 0) for d, r in docs.items()} for q, docs in qrels.items()}
    measures = parse_measures(ALL_MEASURES)
    got = evaluate_dict(run, Qrels(qrels), measures)
    want = evaluate_dict(run, Qrels(zeroed), measures)
    for name in got.values:
        np.testing.assert_array_equal(got.values[name], want.values[name])
    _check_against_oracle(run, zeroed)


def test_hand_checked_values() -> None:
    # Ranking by trec_eval: x(5) a(3) c(1) b(1): c before b (equal scores, id descending).
    run = {"q": {"a": 3.0, "b": 1.0, "c": 1.0, "x": 5.0}}
    qrels = Qrels({"q": {"a": 0, "b": 2, "c": 1}})
    got = evaluate_dict(run, qrels, parse_measures(["RR@10", "P@10", "R@3", "AP@10",
                                                    "nDCG@10"]))
    assert got.values["RR@10"][0] == pytest.approx(1 / 3)
    assert got.values["P@10"][0] == pytest.approx(0.2)  # divides by 10, not by 4 retrieved
    assert got.values["R@3"][0] == pytest.approx(0.5)
    assert got.values["AP@10"][0] == pytest.approx((1 / 3 + 2 / 4) / 2)
    dcg = 1 / np.log2(4) + 2 / np.log2(5)
    idcg = 2 / np.log2(2) + 1 / np.log2(3)
    assert got.values["nDCG@10"][0] == pytest.approx(dcg / idcg)


def test_every_qrels_query_gets_a_value_in_qrels_order() -> None:
    run = {"q9": {"a": 1.0}, "q2": {"a": 1.0}}  # q9 is not judged: ignored
    qrels = Qrels({"q3": {"a": 1}, "q2": {"a": 1}, "q1": {"a": 0}, "q0": {}})
    got = evaluate_dict(run, qrels, parse_measures(["nDCG@10", "RR@10"]))
    assert got.query_ids == ("q3", "q2", "q1", "q0")
    np.testing.assert_array_equal(got.values["nDCG@10"], [0.0, 1.0, 0.0, 0.0])
    assert not np.isnan(got.values["RR@10"]).any()


def test_empty_run_scores_zero() -> None:
    got = evaluate_dict({}, Qrels({"q": {"a": 1}}), parse_measures(["AP@10"]))
    np.testing.assert_array_equal(got.values["AP@10"], [0.0])


def test_relevant_documents_outside_the_vocabulary_still_count() -> None:
    # "zz" is relevant but not in the corpus: recall can never reach 1 (trec_eval agrees).
    ranking = Ranking.from_dict({"q": {"a": 2.0, "b": 1.0}}, doc_ids=("a", "b", "c"))
    index = JudgedIndex.build(Qrels({"q": {"a": 1, "zz": 1}}), ranking.doc_ids)
    got = evaluate(ranking, index, parse_measures(["R@10"]))
    assert got.values["R@10"][0] == pytest.approx(0.5)


def test_index_for_another_vocabulary_is_rejected() -> None:
    ranking = Ranking.from_dict({"q": {"a": 2.0}})
    index = JudgedIndex.build(Qrels({"q": {"a": 1}}), ("b", "a"))
    with pytest.raises(ValueError, match="vocabulary"):
        evaluate(ranking, index, parse_measures(["R@10"]))


def test_uneven_run_lengths_take_the_sorting_path_and_agree() -> None:
    rng = np.random.default_rng(3)
    run = {f"q{i}": {"d0": 1.0} for i in range(300)}
    run["q0"] = {f"d{j}": float(s) for j, s in enumerate(rng.integers(0, 50, 20_000))}
    qrels = {f"q{i}": {"d0": 1, "d7": 2, "d19999": 1} for i in range(300)}
    measures = parse_measures(["nDCG@10", "R@100", "AP@100"])
    got = evaluate_dict(run, Qrels(qrels), measures)
    results = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100",
                                                     "map_cut.100"}).evaluate(run)
    for name, key in (("nDCG@10", "ndcg_cut_10"), ("R@100", "recall_100"),
                      ("AP@100", "map_cut_100")):
        want = [results[q][key] for q in qrels]
        np.testing.assert_allclose(got.values[name], want, atol=1e-6, rtol=0)
    assert got.values["R@100"][0] < 1.0  # d19999 sits below rank 100 in q0


def test_inputs_are_not_modified() -> None:
    run = {"q": {"b": 1.0, "a": 1.0, "c": 2.0}}
    qrels = {"q": {"a": 2, "b": -1}}
    run_copy, qrels_copy = json.loads(json.dumps(run)), json.loads(json.dumps(qrels))
    ranking = Ranking.from_dict(run)
    indices = ranking.indices.copy()
    evaluate_dict(run, Qrels(qrels), parse_measures(["nDCG@2"]))
    evaluate(ranking, Qrels(qrels), parse_measures(["nDCG@2"]))
    assert run == run_copy and qrels == qrels_copy
    np.testing.assert_array_equal(ranking.indices, indices)


def test_reference_measures_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from evalq.measure.measures import FAMILIES, Family, Measure

    # A stand-in reference family, removed again after the test.
    monkeypatch.setitem(FAMILIES, "_ref", Family("_ref", "reference", needs_cutoff=True))
    with pytest.raises(InputError, match="reference"):
        evaluate_dict({}, Qrels({"q": {"a": 1}}), [Measure("_ref", 10)])


# ---------------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("nDCG@10", "nDCG@10"),
        ("ndcg_cut_10", "nDCG@10"),
        ("ndcg_cut.10", "nDCG@10"),
        ("NDCG@10", "nDCG@10"),
        ("recall_100", "R@100"),
        ("Recall@100", "R@100"),
        ("R@100", "R@100"),
        ("P_10", "P@10"),
        ("P@5", "P@5"),
        ("MRR@10", "RR@10"),
        ("RR@10", "RR@10"),
        ("recip_rank@10", "RR@10"),
        ("map_cut_100", "AP@100"),
        ("MAP@100", "AP@100"),
        ("AP@100", "AP@100"),
    ],
)
def test_alias_parsing(text: str, name: str) -> None:
    measure = parse_measure(text)
    assert measure.name == name
    assert measure.against == "qrels"
    assert measure.higher_is_better is True


def test_unknown_name_gets_did_you_mean() -> None:
    with pytest.raises(InputError, match="Did you mean 'nDCG'"):
        parse_measure("nDGC@10")


def test_cutoff_is_required() -> None:
    with pytest.raises(InputError, match="needs a cutoff"):
        parse_measure("nDCG")


# ---------------------------------------------------------------------- a second peer


def test_agrees_with_ir_measures_on_one_run() -> None:
    ir_measures = pytest.importorskip("ir_measures")
    rng = np.random.default_rng(7)
    # Distinct scores: ir_measures truncates runs for RR@k before trec_eval sorts them, so
    # with ties at the cutoff it breaks them its own way (pytrec_eval is the tie oracle).
    run = {f"q{i}": {f"d{j}": float(rng.random()) for j in rng.choice(60, 30, False)}
           for i in range(40)}
    qrels = {f"q{i}": {f"d{j}": int(rng.integers(0, 3)) for j in rng.choice(60, 10, False)}
             for i in range(40)}
    names = ["nDCG@10", "R@20", "P@10", "RR@10", "AP@20"]
    peer = [ir_measures.nDCG @ 10, ir_measures.R @ 20, ir_measures.P @ 10,
            ir_measures.RR @ 10, ir_measures.AP @ 20]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        aggregates = ir_measures.calc_aggregate(peer, qrels, run)
    got = evaluate_dict(run, Qrels(qrels), parse_measures(names))
    for name, measure in zip(names, peer, strict=True):
        assert got.mean(name) == pytest.approx(aggregates[measure], abs=1e-6)
