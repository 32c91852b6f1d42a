"""Sharded exact search returns the same run as one flat index, bit for bit, ties included."""

from __future__ import annotations

import numpy as np
import pytest

from evalq.retrieve.search import search
from evalq.retrieve.shards import search_shards


def _split(vectors: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    cuts = np.cumsum(sizes)[:-1]
    return np.split(vectors, cuts)


def _assert_same(a, b) -> None:
    assert a.query_ids == b.query_ids and a.doc_ids == b.doc_ids
    np.testing.assert_array_equal(a.indices, b.indices)
    # bit for bit: compare the float64 bit patterns, nan slots included
    assert a.scores.tobytes() == b.scores.tobytes()


@pytest.mark.parametrize("sizes", [[700], [250, 250, 200], [1, 333, 0, 366], [90] * 7 + [70]])
def test_random_vectors_match_flat_index(sizes: list[int]) -> None:
    rng = np.random.default_rng(7)
    docs = rng.standard_normal((700, 48)).astype(np.float32)
    queries = rng.standard_normal((57, 48)).astype(np.float32)
    doc_ids = [f"d{rng.integers(1_000_000):07d}-{i}" for i in range(700)]
    query_ids = [f"q{i}" for i in range(57)]
    flat = search(queries, docs, doc_ids, query_ids, depth=25)
    sharded = search_shards(queries, _split(docs, sizes), doc_ids, query_ids, depth=25,
                            query_chunk=16)
    _assert_same(sharded, flat)


def test_ties_across_shards_and_at_the_depth_boundary() -> None:
    """Forty copies of each of a few vectors: every score is tied with dozens of others
    spread over all shards, and the depth cut falls inside a run of equal scores. The ids
    are shuffled so the id order differs from the storage order."""
    rng = np.random.default_rng(3)
    base = rng.standard_normal((5, 16)).astype(np.float32)
    docs = np.repeat(base, 40, axis=0)
    perm = rng.permutation(len(docs))
    docs = docs[perm]
    doc_ids = [f"doc-{x:04d}" for x in rng.permutation(10_000)[: len(docs)]]
    queries = rng.standard_normal((9, 16)).astype(np.float32)
    query_ids = [f"q{i}" for i in range(9)]
    flat = search(queries, docs, doc_ids, query_ids, depth=30)
    # the cut is inside a tie: the 30th score equals the 31st of the full ordering
    full = search(queries, docs, doc_ids, query_ids, depth=60)
    assert (full.scores[:, 29] == full.scores[:, 30]).all()
    for sizes in ([67, 66, 67], [13] * 15 + [5], [199, 1]):
        _assert_same(search_shards(queries, _split(docs, sizes), doc_ids, query_ids,
                                   depth=30), flat)
    # and the winners of each tie are the largest ids, as trec_eval ranks them
    row = flat.indices[0]
    tied = flat.scores[0] == flat.scores[0, -1]
    chosen = {doc_ids[i] for i in row[tied]}
    top = docs[row[0]]
    all_tied = [doc_ids[i] for i in range(len(docs)) if (docs[i] == top).all()]
    assert chosen == set(sorted(all_tied)[-len(chosen):])


def test_memory_mapped_shards(tmp_path) -> None:
    rng = np.random.default_rng(11)
    docs = rng.standard_normal((300, 32)).astype(np.float32)
    queries = rng.standard_normal((10, 32)).astype(np.float32)
    paths = []
    for i, part in enumerate(_split(docs, [100, 120, 80])):
        paths.append(tmp_path / f"{i}.npy")
        np.save(paths[-1], part)
    shards = [np.load(p, mmap_mode="r") for p in paths]
    ids, qids = [str(i) for i in range(300)], [str(i) for i in range(10)]
    _assert_same(search_shards(queries, shards, ids, qids, depth=400),
                 search(queries, docs, ids, qids, depth=400))


def test_mismatched_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="3 document vectors"):
        search_shards(np.zeros((1, 4), np.float32), [np.zeros((3, 4), np.float32)],
                      ["a", "b"], ["q"], depth=2)
