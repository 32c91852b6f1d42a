"""The measure registry refuses duplicates, like the backend and quantization registries:
a second family of a name, an alias another family answers to, or a repeated alias
pattern would silently change what an existing measure string means."""

from __future__ import annotations

import pytest

from evalq.measure.measures import Family, register_family, register_pattern_alias
from evalq.measure.registry import FAMILIES, parse_measure


def test_a_measure_family_cannot_be_registered_twice() -> None:
    before = dict(FAMILIES)
    with pytest.raises(ValueError, match="'nDCG' is already registered"):
        register_family(Family("nDCG", "qrels", needs_cutoff=True))
    with pytest.raises(ValueError, match="mrr already name"):
        register_family(Family("MyRR", "qrels", needs_cutoff=True, aliases=("MRR",)))
    with pytest.raises(ValueError, match="already registered"):
        register_pattern_alias(r"ndcg_cut[._](\d+)", "nDCG")
    assert before == FAMILIES
    assert parse_measure("MRR@10").name == "RR@10"  # the alias still means what it meant


def test_every_family_declares_the_range_of_its_values() -> None:
    """The results readers refuse a stored per-query value outside its family's range
    (an nDCG of 2.0: issue 32), so a family registered without one would go unchecked."""
    from evalq.core.ranges import RANGES

    unranged = sorted(name for name, family in FAMILIES.items() if family.bounds is None)
    assert not unranged, f"add {unranged} to evalq.core.ranges.RANGES"
    assert set(RANGES) == set(FAMILIES)  # and none listed that is not a family
