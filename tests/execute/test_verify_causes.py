"""`evalq verify`'s causes, each from its own pattern of differences (synthetic vectors:
the checks are pure functions; the real engines and a served endpoint are in
tests/execute/test_certify.py)."""

from __future__ import annotations

import numpy as np

from evalq.execute.verify_causes import compare

ROLES = ["query"] * 4 + ["document"] * 4
TOKENS = [8, 9, 10, 12, 40, 90, 200, 250]
SETTINGS = {"normalize": True, "max_length": 256, "query_prefix": "query: "}
TOL = 1e-4


def certified() -> np.ndarray:
    rng = np.random.default_rng(0)
    v = rng.normal(size=(8, 32)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def moved(v: np.ndarray, rows: list[int]) -> np.ndarray:
    out = v.copy()
    out[rows] = np.roll(out[rows], 1, axis=1)  # another direction, still unit length
    return out


def check(served: np.ndarray) -> tuple[bool, str]:
    found = compare(served, certified(), ROLES, TOKENS, SETTINGS, TOL)
    return found.matched, " | ".join(found.causes)


def test_the_same_vectors_match_within_the_tolerance() -> None:
    v = certified()
    assert check(v + 1e-7) == (True, "")


def test_missing_normalization_is_named_even_when_directions_match() -> None:
    matched, why = check(certified() * 3.0)
    assert not matched and why.startswith("missing normalization")


def test_only_queries_differing_is_the_query_instruction() -> None:
    matched, why = check(moved(certified(), [0, 1, 2, 3]))
    assert not matched and "query instruction" in why and "'query: '" in why


def test_only_the_longest_texts_differing_is_truncation() -> None:
    matched, why = check(moved(certified(), [6, 7]))
    assert not matched and "truncation length" in why and "more than 90 tokens" in why


def test_every_text_differing_is_pooling_dtype_or_model() -> None:
    matched, why = check(moved(certified(), list(range(8))))
    assert not matched and "pooling" in why


def test_matryoshka_cut_with_and_without_renormalizing() -> None:
    v = certified()
    cut = v[:, :16]
    assert "cut to 16 of 32 without renormalizing" in check(cut)[1]
    renorm = cut / np.linalg.norm(cut, axis=1, keepdims=True)
    matched, why = check(renorm)
    assert not matched and why == "Matryoshka dimensions cut to 16 of 32"


def test_no_known_pattern_says_so() -> None:
    matched, why = check(moved(certified(), [1, 5]))
    assert not matched and "no pattern" in why
