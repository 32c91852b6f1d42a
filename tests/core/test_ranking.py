"""Ranking: trec_eval order (score descending, then doc id descending; scores compared as
float32), conversions to and from dicts, matrices and TREC run files."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalq.core.errors import InputError
from evalq.core.ranking import Ranking, trec_score
from evalq.data.trec import read_trec_run, write_trec_run

DOCS = [f"d{i}" for i in range(12)]


def reference_order(docs: dict[str, float]) -> list[str]:
    """trec_eval's order, the slow obvious way."""
    return [d for d, _ in sorted(docs.items(),
                                 key=lambda item: (float(np.float32(item[1])), item[0]),
                                 reverse=True)]


runs = st.dictionaries(
    st.sampled_from([f"q{i}" for i in range(5)]),
    st.dictionaries(
        st.sampled_from(DOCS),
        st.one_of(st.sampled_from([0.5, 1.0, 2.0]),
                  st.floats(-3, 3, allow_nan=False, allow_infinity=False)),
        min_size=0,
        max_size=10,
    ),
    max_size=5,
)


def rows_as_lists(ranking: Ranking) -> dict[str, list[str]]:
    return {
        q: [ranking.doc_ids[i] for i in row if i >= 0]
        for q, row in zip(ranking.query_ids, ranking.indices.tolist(), strict=True)
    }


@settings(max_examples=200, deadline=None)
@given(runs, st.one_of(st.none(), st.integers(1, 12)))
def test_from_dict_is_trec_eval_order(run: dict, depth: int | None) -> None:
    ranking = Ranking.from_dict(run, depth=depth)
    assert ranking.query_ids == tuple(run)
    longest = max((len(d) for d in run.values()), default=0)
    assert ranking.depth == (longest if depth is None else depth)
    got = rows_as_lists(ranking)
    for q, docs in run.items():
        want = reference_order(docs)[: ranking.depth]
        assert got[q] == want
        row = ranking.scores[ranking.query_ids.index(q)]
        np.testing.assert_array_equal(row[: len(want)], [docs[d] for d in want])
        assert np.isnan(row[len(want):]).all()
        assert (ranking.indices[ranking.query_ids.index(q), len(want):] == -1).all()


@settings(max_examples=200, deadline=None)
@given(runs, st.randoms(use_true_random=False))
def test_from_search_reorders_only_ties(run: dict, rnd) -> None:
    """Matrices sorted by score with ties in random order become trec_eval's order."""
    run = {q: d for q, d in run.items() if d}
    vocabulary = tuple(DOCS)
    depth = max((len(d) for d in run.values()), default=1)
    idx = np.full((len(run), depth), -1, dtype=np.int64)
    sc = np.full((len(run), depth), np.nan)
    for r, docs in enumerate(run.values()):
        items = list(docs.items())
        rnd.shuffle(items)
        items.sort(key=lambda item: -item[1])  # stable: ties stay shuffled
        idx[r, : len(items)] = [vocabulary.index(d) for d, _ in items]
        sc[r, : len(items)] = [s for _, s in items]
    before = idx.copy(), sc.copy()
    ranking = Ranking.from_search(list(run), vocabulary, idx, sc)
    np.testing.assert_array_equal(idx, before[0])  # inputs untouched
    got = rows_as_lists(ranking)
    for q, docs in run.items():
        assert got[q] == reference_order(docs)
    assert rows_as_lists(ranking) == rows_as_lists(Ranking.from_dict(run))


def test_depth_cut_respects_ties_at_the_boundary() -> None:
    # Input order would keep "a", "b"; trec_eval ranks z, then c, b, a (id descending).
    ranking = Ranking.from_dict({"q": {"a": 1.0, "b": 1.0, "c": 1.0, "z": 2.0}}, depth=2)
    assert rows_as_lists(ranking) == {"q": ["z", "c"]}


def test_float32_equal_scores_are_ties() -> None:
    # trec_eval keeps scores in a C float: these two are a tie, so "b" (larger id) wins.
    ranking = Ranking.from_dict({"q": {"a": 1.000000001, "b": 1.0}})
    assert rows_as_lists(ranking) == {"q": ["b", "a"]}
    assert trec_score(np.array([1.000000001]))[0] == np.float32(1.0)
    assert ranking.scores[0, 1] == 1.000000001  # values are kept as given


def test_from_search_marks_empty_slots_and_validates() -> None:
    ranking = Ranking.from_search(["q"], ["a", "b"], np.array([[1, -1]]),
                                  np.array([[0.3, -3.4e38]]))
    assert ranking.indices.tolist() == [[1, -1]]
    assert np.isnan(ranking.scores[0, 1])
    with pytest.raises(ValueError, match="best first"):
        Ranking.from_search(["q"], ["a", "b"], np.array([[0, 1]]), np.array([[0.1, 0.2]]))
    with pytest.raises(ValueError, match="same shape"):
        Ranking.from_search(["q"], ["a", "b"], np.array([[0, 1]]), np.array([0.2, 0.1]))
    with pytest.raises(ValueError, match="rows"):
        Ranking.from_search(["q", "r"], ["a", "b"], np.array([[0, 1]]), np.array([[0.2, 0.1]]))
    with pytest.raises(ValueError, match="empty slots"):
        Ranking.from_search(["q"], ["a", "b"], np.array([[-1, 1]]), np.array([[0.2, 0.1]]))
    with pytest.raises(ValueError, match="indices"):
        Ranking.from_search(["q"], ["a", "b"], np.array([[2, 1]]), np.array([[0.2, 0.1]]))


def test_from_dict_with_a_vocabulary() -> None:
    ranking = Ranking.from_dict({"q": {"b": 1.0, "c": 2.0}}, doc_ids=["a", "b", "c"])
    assert ranking.doc_ids == ("a", "b", "c")
    assert ranking.indices.tolist() == [[2, 1]]
    with pytest.raises(InputError, match="'zz'"):
        Ranking.from_dict({"q": {"zz": 1.0}}, doc_ids=["a"])


def test_to_dict_round_trip() -> None:
    run = {"q1": {"a": 0.5, "b": 0.5, "c": 0.7}, "q2": {"x": -1.0}}
    ranking = Ranking.from_dict(run)
    back = ranking.to_dict()
    assert back == run
    assert list(back["q1"]) == ["c", "b", "a"]  # rank order


def test_trec_run_file_round_trip_is_exact(tmp_path) -> None:
    run = {"q1": {"a": 0.1 + 0.2, "b": 1 / 3, "c": 1e-300}, "q2": {"x": -2.5, "y": 7.0}}
    ranking = Ranking.from_dict(run)
    path = tmp_path / "run.trec"
    write_trec_run(ranking, path, tag="mine")
    lines = path.read_text().splitlines()
    assert lines[0] == f"q1 Q0 b 1 {1 / 3!r} mine"
    assert [line.split()[3] for line in lines] == ["1", "2", "3", "1", "2"]
    again = read_trec_run(path)
    assert again.to_dict() == run
    np.testing.assert_array_equal(again.scores, ranking.scores)


def test_malformed_run_line_names_file_and_line(tmp_path) -> None:
    path = tmp_path / "bad.trec"
    path.write_text("q1 Q0 a 1 0.5 t\nq1 Q0 b 2 t\n")
    with pytest.raises(InputError) as err:
        read_trec_run(path)
    assert err.value.line == 2
    assert str(path) in str(err.value)
    assert err.value.fix


def test_write_rejects_whitespace_in_tag(tmp_path) -> None:
    ranking = Ranking.from_dict({"q": {"a": 1.0}})
    with pytest.raises(InputError, match="whitespace"):
        write_trec_run(ranking, tmp_path / "r.trec", tag="my run")
