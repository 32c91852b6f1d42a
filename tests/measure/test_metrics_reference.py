"""Reference-run measures: hand-computed cases, naive oracles, scipy's tau, edge rules."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import kendalltau

from evalq.core.errors import InputError
from evalq.core.ranking import Ranking
from evalq.measure.measures import parse_measure, parse_measures
from evalq.measure.reference import evaluate_reference, vector_agreement

DOCS = tuple("abcdefghij")


def ranking(rows: dict[str, str], docs: tuple[str, ...] = DOCS) -> Ranking:
    """Ranking from {qid: "abc"} (one letter per document, best first)."""
    depth = max(len(r) for r in rows.values())
    indices = np.full((len(rows), depth), -1, dtype=np.int64)
    scores = np.full((len(rows), depth), np.nan)
    for i, row in enumerate(rows.values()):
        indices[i, : len(row)] = [docs.index(d) for d in row]
        scores[i, : len(row)] = -np.arange(len(row), dtype=np.float64)
    return Ranking(tuple(rows), docs, indices, scores)


def values(cand: Ranking, ref: Ranking, *names: str) -> dict[str, np.ndarray]:
    return evaluate_reference(cand, ref, parse_measures(list(names))).values


# ----------------------------------------------------------------- hand-computed cases


def test_hand_computed_small_case() -> None:
    # candidate a b c, reference b a d (k = 3)
    got = values(
        ranking({"q": "abc"}),
        ranking({"q": "bad"}),
        "overlap@3",
        "refnDCG@3",
        "RBO@3",
        "RBO(p=0.5)@3",
        "tau@3",
    )
    # overlap: {a, b} shared -> 2/3
    assert got["overlap@3"][0] == pytest.approx(2 / 3)
    # pseudo-gains from the reference (depth 3): b=3, a=2, d=1.
    # DCG = 2/log2(2) + 3/log2(3); IDCG = 3/log2(2) + 2/log2(3) + 1/log2(4)
    dcg = 2 + 3 / math.log2(3)
    idcg = 3 + 2 / math.log2(3) + 1 / 2
    assert got["refnDCG@3"][0] == pytest.approx(dcg / idcg)
    # X_1 = 0, X_2 = 2, X_3 = 2.
    # p=0.9: (1-p)/p * (0 + 2/2*0.81 + 2/3*0.729) + 2/3*0.729 = 0.144 + 0.486 = 0.63
    assert got["RBO@3"][0] == pytest.approx(0.63)
    # p=0.5: 1 * (0.25 + 2/3*0.125) + 2/3*0.125 = 1/3 + 1/12 = 5/12
    assert got["RBO(p=0.5)@3"][0] == pytest.approx(5 / 12)
    # union {a,b,c,d}: candidate ranks a1 b2 c3 d4, reference a2 b1 c4 d3;
    # pairs ab, cd discordant, the other four concordant: (4-2)/6
    assert got["tau@3"][0] == pytest.approx(1 / 3)


def test_disjoint_lists_and_reversal() -> None:
    got = values(ranking({"q": "abc"}), ranking({"q": "def"}), "overlap@3", "RBO@3", "refnDCG@3")
    assert got["overlap@3"][0] == 0.0
    assert got["RBO@3"][0] == 0.0
    assert got["refnDCG@3"][0] == 0.0
    # full reversal of the same three documents: tau = -1
    assert values(ranking({"q": "cba"}), ranking({"q": "abc"}), "tau@3")["tau@3"][0] == -1.0
    # disjoint lists of two: candidate ranks a1 b2 c3 d3, reference c1 d2 a3 b3.
    # ab tied in the reference, cd tied in the candidate, the four cross pairs discordant:
    # tau-b = (0 - 4) / sqrt((4 + 1) * (4 + 1)) = -0.8
    tau = values(ranking({"q": "ab"}), ranking({"q": "cd"}), "tau@2")["tau@2"][0]
    assert tau == pytest.approx(-0.8)
    assert tau == pytest.approx(kendalltau([1, 2, 3, 3], [3, 3, 1, 2]).statistic)


def test_cutoff_takes_the_prefix() -> None:
    cand, ref = ranking({"q": "abcdef"}), ranking({"q": "abcghi"})
    got = values(cand, ref, "overlap@3", "overlap@6", "RBO@3", "tau@3")
    assert got["overlap@3"][0] == 1.0
    assert got["overlap@6"][0] == pytest.approx(3 / 6)
    assert got["RBO@3"][0] == 1.0
    assert got["tau@3"][0] == 1.0


# ----------------------------------------------------------------- random vs oracles


def random_pair(seed: int, queries: int = 40, n_docs: int = 30, k: int = 10):
    rng = np.random.default_rng(seed)
    docs = tuple(f"d{i}" for i in range(n_docs))
    ref = np.stack([rng.permutation(n_docs)[:k] for _ in range(queries)])
    cand = ref.copy()
    for row in cand:
        # perturb: a few swaps, a few replacements by documents outside the top-k
        for _ in range(rng.integers(0, 4)):
            i, j = rng.integers(0, k, 2)
            row[i], row[j] = row[j], row[i]
        outside = [d for d in range(n_docs) if d not in row]
        for _ in range(rng.integers(0, 4)):
            row[rng.integers(0, k)] = outside.pop(rng.integers(0, len(outside)))
    qids = tuple(f"q{i}" for i in range(queries))
    scores = np.tile(-np.arange(k, dtype=np.float64), (queries, 1))
    return Ranking(qids, docs, cand, scores), Ranking(qids, docs, ref, scores.copy())


def naive_rbo(s: list[int], t: list[int], p: float) -> float:
    k = len(s)
    x = [len(set(s[:d]) & set(t[:d])) for d in range(1, k + 1)]
    series = sum(x[d - 1] / d * p**d for d in range(1, k + 1))
    return x[k - 1] / k * p**k + (1 - p) / p * series


def union_ranks(s: list[int], t: list[int]) -> tuple[list[int], list[int]]:
    k = len(s)
    union = list(dict.fromkeys(s + t))
    rank_s = [s.index(d) + 1 if d in s else k + 1 for d in union]
    rank_t = [t.index(d) + 1 if d in t else k + 1 for d in union]
    return rank_s, rank_t


def naive_ref_ndcg(s: list[int], t: list[int]) -> float:
    k = len(t)
    gain = {d: k - r for r, d in enumerate(t)}
    dcg = sum(gain.get(d, 0) / math.log2(i + 2) for i, d in enumerate(s))
    idcg = sum((k - r) / math.log2(r + 2) for r in range(k))
    return dcg / idcg


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_runs_agree_with_naive_oracles_and_scipy(seed: int) -> None:
    cand, ref = random_pair(seed)
    got = values(cand, ref, "overlap@10", "refnDCG@10", "RBO@10", "RBO(p=0.7)@5", "tau@10")
    for i in range(len(ref.query_ids)):
        s, t = cand.indices[i].tolist(), ref.indices[i].tolist()
        assert got["overlap@10"][i] == pytest.approx(len(set(s) & set(t)) / 10)
        assert got["refnDCG@10"][i] == pytest.approx(naive_ref_ndcg(s, t))
        assert got["RBO@10"][i] == pytest.approx(naive_rbo(s, t, 0.9))
        assert got["RBO(p=0.7)@5"][i] == pytest.approx(naive_rbo(s[:5], t[:5], 0.7))
        rank_s, rank_t = union_ranks(s, t)
        expected = kendalltau(rank_s, rank_t).statistic  # tau-b, ties at rank k+1
        assert got["tau@10"][i] == pytest.approx(expected)


def test_tau_with_short_lists_matches_scipy() -> None:
    cand, ref = random_pair(11, queries=60)
    rng = np.random.default_rng(11)
    cand_idx, ref_idx = cand.indices.copy(), ref.indices.copy()
    for row in (*cand_idx, *ref_idx):
        row[rng.integers(0, 11) :] = -1  # runs shorter than k, some empty
    z = np.zeros(cand_idx.shape)
    got = values(
        Ranking(cand.query_ids, cand.doc_ids, cand_idx, z),
        Ranking(ref.query_ids, ref.doc_ids, ref_idx, z),
        "tau@10",
    )["tau@10"]
    for i in range(60):
        s = [d for d in cand_idx[i].tolist() if d >= 0]
        t = [d for d in ref_idx[i].tolist() if d >= 0]
        if not t:
            assert got[i] == (1.0 if not s else 0.0)
            continue
        union = list(dict.fromkeys(s + t))
        rank_s = [s.index(d) + 1 if d in s else 11 for d in union]
        rank_t = [t.index(d) + 1 if d in t else 11 for d in union]
        expected = kendalltau(rank_s, rank_t).statistic if len(union) > 1 else math.nan
        if math.isnan(expected):  # no untied pair: the documented convention
            expected = 1.0 if s == t else 0.0
        assert got[i] == pytest.approx(expected), (s, t)


def test_tau_equals_scipy_on_untied_permutations() -> None:
    rng = np.random.default_rng(7)
    docs = tuple(f"d{i}" for i in range(12))
    ref = np.stack([rng.permutation(12) for _ in range(25)])
    cand = np.stack([rng.permutation(row) for row in ref])  # same documents, new order
    qids = tuple(f"q{i}" for i in range(25))
    z = np.zeros(ref.shape)
    got = values(Ranking(qids, docs, cand, z), Ranking(qids, docs, ref, z), "tau@12")["tau@12"]
    for i in range(25):
        pos_c = {d: r for r, d in enumerate(cand[i])}
        pos_r = {d: r for r, d in enumerate(ref[i])}
        expected = kendalltau([pos_c[d] for d in range(12)], [pos_r[d] for d in range(12)])
        assert got[i] == pytest.approx(expected.statistic)


def test_identical_rankings_score_one_everywhere() -> None:
    _, ref = random_pair(3, queries=30, n_docs=50, k=20)
    got = values(ref, ref, "overlap@20", "refnDCG@20", "RBO@20", "tau@20", "overlap@1", "tau@1")
    for name, v in got.items():
        np.testing.assert_allclose(v, 1.0, rtol=0, atol=1e-12, err_msg=name)


# ----------------------------------------------------------------- alignment and edges


def test_missing_candidate_query_scores_zero_and_order_follows_reference() -> None:
    ref = ranking({"q1": "abc", "q2": "def", "q3": "ghi"})
    cand = ranking({"q3": "ghi", "q1": "abc"})  # q2 missing, other order
    result = evaluate_reference(cand, ref, parse_measures(["overlap@3", "RBO@3", "tau@3"]))
    assert result.query_ids == ("q1", "q2", "q3")
    for v in result.values.values():
        np.testing.assert_array_equal(v, [1.0, 0.0, 1.0])


def test_candidate_with_other_doc_id_space_is_remapped() -> None:
    ref = ranking({"q": "abc"})
    other_docs = ("zz", "c", "b", "a")  # same ids, other order, plus one unknown
    cand = Ranking(("q",), other_docs, np.array([[3, 0, 1]]), np.zeros((1, 3)))  # a zz c
    got = values(cand, ref, "overlap@3")
    assert got["overlap@3"][0] == pytest.approx(2 / 3)


def test_shallow_runs_are_padded() -> None:
    # corpus of 2 documents, cutoff 5: identical short lists still agree fully
    ref = ranking({"q": "ab"})
    got = values(ref, ref, "overlap@5", "RBO@5", "tau@5", "refnDCG@5")
    for name, v in got.items():
        assert v[0] == 1.0, name
    # candidate shorter than the reference: only its one document counts
    got = values(ranking({"q": "a"}), ref, "overlap@5", "RBO@5")
    assert got["overlap@5"][0] == 0.5
    # l = 2: X_1 = 1, X_2 = 1 -> 0.1/0.9*(0.9 + 0.5*0.81) + 0.5*0.81
    assert got["RBO@5"][0] == pytest.approx(0.1 / 0.9 * (0.9 + 0.405) + 0.405)


def test_inputs_are_not_modified() -> None:
    cand, ref = random_pair(4)
    before = cand.indices.copy(), ref.indices.copy()
    values(cand, ref, "overlap@10", "tau@10", "RBO@10", "refnDCG@10")
    np.testing.assert_array_equal(cand.indices, before[0])
    np.testing.assert_array_equal(ref.indices, before[1])


def test_parsing_names_and_aliases() -> None:
    assert parse_measure("ref-nDCG@10").name == "refnDCG@10"
    assert parse_measure("RBO(p=0.8)@10").name == "RBO(p=0.8)@10"
    assert parse_measure("RBO@10").name == "RBO@10"
    assert parse_measure("kendall@5").name == "tau@5"
    assert parse_measure("cosine").against == "reference"
    with pytest.raises(InputError):
        parse_measure("cosine@10")
    with pytest.raises(InputError):
        parse_measure("overlap")


def test_rbo_rejects_p_outside_unit_interval() -> None:
    ref = ranking({"q": "abc"})
    with pytest.raises(InputError, match="strictly between 0 and 1"):
        evaluate_reference(ref, ref, [parse_measure("RBO(p=1)@3")])


# ----------------------------------------------------------------- vectors


def test_vector_agreement_and_cosine_measure() -> None:
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(6, 8)).astype(np.float32)
    cand = ref + rng.normal(scale=0.05, size=ref.shape).astype(np.float32)
    ids = [f"q{i}" for i in range(6)]
    agreement = vector_agreement(ref, cand, ids)
    r64, c64 = ref.astype(np.float64), cand.astype(np.float64)
    expected = (r64 * c64).sum(1) / np.linalg.norm(r64, axis=1) / np.linalg.norm(c64, axis=1)
    np.testing.assert_allclose(agreement.cosine, expected, rtol=1e-12)
    assert agreement.cosine.dtype == np.float64
    summary = agreement.summary()
    assert summary.ok
    assert summary.min == pytest.approx(expected.min())
    assert summary.p1 == pytest.approx(np.percentile(expected, 1))
    assert summary.mean == pytest.approx(expected.mean())
    assert vector_agreement(ref, ref, ids).summary().min == pytest.approx(1.0)

    # the cosine measure: aligned to the reference ranking's query order
    rows = {q: "ab" for q in reversed(ids)}
    result = evaluate_reference(
        ranking(rows), ranking(rows), [parse_measure("cosine")], query_agreement=agreement
    )
    np.testing.assert_allclose(result.values["cosine"], expected[::-1])
    with pytest.raises(ValueError, match="query vectors"):
        evaluate_reference(ranking(rows), ranking(rows), [parse_measure("cosine")])


def test_nan_and_inf_are_counted_and_fail_the_summary() -> None:
    ref = np.ones((4, 3))
    cand = np.ones((4, 3))
    cand[1, 2] = np.nan
    cand[2, 0] = np.inf
    cand[3] = 0.0  # zero vector: undefined cosine
    agreement = vector_agreement(ref, cand, ["a", "b", "c", "d"])
    assert agreement.cosine[0] == pytest.approx(1.0)
    assert np.isnan(agreement.cosine[1:]).all()
    summary = agreement.summary()
    assert (summary.candidate_nan, summary.candidate_inf, summary.undefined) == (1, 1, 3)
    assert not summary.ok
    assert math.isnan(summary.min) and math.isnan(summary.p1) and math.isnan(summary.mean)


def test_vector_shape_mismatch_is_an_input_error() -> None:
    with pytest.raises(InputError, match="same dimension"):
        vector_agreement(np.ones((3, 4)), np.ones((3, 5)), ["a", "b", "c"])
    with pytest.raises(InputError):
        vector_agreement(np.ones((3, 4)), np.ones((3, 4)), ["a", "b"])


def test_qrels_measures_are_rejected() -> None:
    from evalq.measure.registry import parse_measure as parse_any

    ref = ranking({"q": "abc"})
    with pytest.raises(ValueError, match="not against the reference run"):
        evaluate_reference(ref, ref, [parse_any("nDCG@10")])
