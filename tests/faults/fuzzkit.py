"""Shared pieces of the surface fuzzers (tests/faults/test_fuzz_surfaces.py): one runner
that gives each parser a fixed number of derandomized Hypothesis examples, the counts
(the figures in docs/reliability.md), and the rule every example is held to.

The rule: a parser given generated input either accepts it or raises
:class:`InputError` (exit 2 with a message); anything else would be an exit 3 or a
traceback. Where a parser writes files, nothing may appear outside its folder."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalq.core.errors import InputError

# The short seeded tier runs in every test run; the long one (`slow`) is the bar
# (EVALQ_FUZZ_LONG overrides it, e.g. for a quicker pass over the results-folder readers).
SHORT = 60
LONG = int(os.environ.get("EVALQ_FUZZ_LONG", "10000"))

COUNTS: dict[tuple[str, int], int] = {}
REFUSED: dict[tuple[str, int], int] = {}

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
numbers = st.one_of(st.integers(-10**15, 10**15), st.floats(allow_nan=True,
                                                            allow_infinity=True),
                    st.sampled_from([0, 1, -1, 0.5, 1e9, 1e300, 2**63, "5", True, None]))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)
hostile_text = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["../up", "/abs/path", "a: b", "it's \"q\"", "line\nbreak", "#c", "",
                     ".hidden", "x" * 200, "nul\x00byte", "C:\\win", "~user", "- dash"]))


def run_fuzzer(name: str, examples: int, strategy: st.SearchStrategy[Any],
               check: Callable[[Any], None]) -> tuple[int, int]:
    """``check`` on ``examples`` generated inputs (derandomized: the same ones every run);
    an :class:`InputError` counts as a refusal, anything else fails the test. Returns
    (and prints) the accepted and refused counts.

    A fuzzer must see both: one whose inputs are all refused never reaches the code past
    the parser's first check (a parser that raises KeyError on valid input would pass it),
    and one whose inputs are all accepted cannot tell a parser that takes garbage from one
    that refuses it. Either fails the test, naming the counts."""
    key = (name, examples)
    COUNTS[key] = REFUSED[key] = 0

    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def fuzz(value: Any) -> None:
        COUNTS[key] += 1
        try:
            check(value)
        except InputError as exc:
            REFUSED[key] += 1
            assert str(exc), "an InputError without a message"

    fuzz()
    refused = REFUSED[key]
    accepted = COUNTS[key] - refused
    print(f"\nfuzz {name}: {COUNTS[key]} inputs, {accepted} accepted, {refused} refused")
    assert COUNTS[key] >= examples, (name, COUNTS[key])
    assert accepted > 0, (f"{name}: none of {COUNTS[key]} inputs was accepted; the fuzzer "
                          "never reaches past the parser's refusals")
    assert refused > 0, (f"{name}: none of {COUNTS[key]} inputs was refused; the fuzzer "
                         "cannot tell a parser that accepts garbage from one that refuses it")
    return accepted, refused


def files_under(root: Path) -> set[Path]:
    return {p for p in root.rglob("*") if p.is_file()}
