"""Asymmetric vector precision (issue 31): documents stored int8 or binary, the float query
scored directly against what is stored, with no quantized first stage."""

from __future__ import annotations

import numpy as np
import pytest

from evalq.retrieve.search import search
from evalq.retrieve.vectorquant import VectorSpec, quantize_documents
from support.hand_search import hand_ranking


def _data(seed: int = 3) -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    rng = np.random.default_rng(seed)
    docs = rng.normal(size=(300, 24)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = rng.normal(size=(20, 24)).astype(np.float32)
    return docs, queries, [f"d{i:03d}" for i in range(300)], [f"q{i}" for i in range(20)]


@pytest.mark.parametrize("quantize", ["int8", "binary"])
def test_float_queries_rank_by_the_stored_documents(quantize: str) -> None:
    docs, queries, doc_ids, query_ids = _data()
    spec = VectorSpec(quantize=quantize, queries="float")  # type: ignore[arg-type]
    stored = quantize_documents(docs, spec)
    ranking = search(queries, docs, doc_ids, query_ids, 10, vectors=spec, quantized=stored)
    expected = hand_ranking(queries, stored.stored_vectors(np.arange(300)), query_ids,
                            doc_ids, 10)
    got = {q: list(docs) for q, docs in ranking.to_dict().items()}
    assert got == expected

def test_float_queries_differ_from_the_quantized_first_stage() -> None:
    """Without the float query the binary codes' Hamming ranking is coarser: the two
    schemes are really different searches (the test can fail if the flag is ignored)."""
    docs, queries, doc_ids, query_ids = _data(5)
    both = VectorSpec(quantize="binary")
    asym = VectorSpec(quantize="binary", queries="float")
    a = search(queries, docs, doc_ids, query_ids, 10, vectors=both)
    b = search(queries, docs, doc_ids, query_ids, 10, vectors=asym)
    assert a.to_dict() != b.to_dict()


def test_float_queries_need_quantized_documents_and_no_rescoring() -> None:
    with pytest.raises(ValueError, match="queries='float'"):
        VectorSpec(quantize="none", queries="float")
    with pytest.raises(ValueError, match="queries='float'"):
        VectorSpec(quantize="int8", rescore=4, queries="float")
    record = VectorSpec(quantize="int8", queries="float").record(24)
    assert record["queries"] == "float" and "asymmetric" in record["candidate_scoring"]
