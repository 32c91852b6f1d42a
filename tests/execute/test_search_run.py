"""A recipe's search through `evalq run` with the real MiniLM (issue 31): 2 weight formats
× 2 vector precisions × 2 Matryoshka widths on a pydocs slice.

Checks what the search promises: every weight variant encoded once (counted at the
encoding call), a combination's nDCG@10 is what trec_eval's implementation gives on its
written run file, the marks are what :mod:`evalq.decide.search` gives on the written
per-query values, and the recommendation is certified and the cheapest certified.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from evalq.app.cli import main
from evalq.app.gate_command import stored_sections_of
from evalq.core.gates import GateSpec
from evalq.execute.regate import regate
from evalq.recipe.stored import stored_search
from support import recipes
from support.search_runs import (
    assert_ndcg_is_trec_eval,
    cheapest_certified,
    counted_run,
    procedure_marks,
)

pytestmark = [pytest.mark.slow, pytest.mark.model]

RECIPE = recipes.recipe(
    "search", queries=100, docs=150, candidates=[recipes.DYN_INT8],
    metrics=["nDCG@10"], reference_metrics=["overlap@10"],
    gates=[recipes.gate("nDCG@10", "qrels", max_drop="10%")], resamples=1000,
    parity={"enabled": False},
    search={"weights": ["fp32", "dyn-int8"],
            "vectors": [{"quantize": "none"}, {"quantize": "int8", "rescore": 4}],
            "dims": [384, 256], "survivors": 3})


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return counted_run(tmp_path_factory.mktemp("search"), RECIPE)


def _search(searched: dict[str, Any]) -> dict[str, Any]:
    return searched["outcome"].summary["search"]


def test_each_weight_variant_is_encoded_once(searched: dict[str, Any]) -> None:
    calls = searched["calls"]
    # two engines (fp32, dyn-int8), each one document and one query encoding
    assert len(calls) == 4 and set(calls.values()) == {1}
    # and no forward pass beyond them: at most 100 queries + 150 documents per engine
    assert 250 < searched["embedded"] <= 2 * 250
    search = _search(searched)
    assert search["encodings"] == search["minimum_encodings"] == 2
    assert len(search["points"]) == 8


def test_a_combination_scores_what_trec_eval_scores(searched: dict[str, Any]) -> None:
    name = "s.dyn-int8.int8+rescore4.256"
    assert_ndcg_is_trec_eval(searched, name, queries=100, docs=150)
    # and the written run is searched at 256 dims: its per-query values differ from 384's
    stored = searched["folder"].read_per_query("pydocs", name)
    wide = searched["folder"].read_per_query("pydocs", "s.dyn-int8.int8+rescore4.384")
    assert not np.array_equal(wide.values["nDCG@10"], stored.values["nDCG@10"])


def test_marks_are_the_procedure_on_the_written_values(searched: dict[str, Any]) -> None:
    search = _search(searched)
    spec = GateSpec(metric="nDCG@10", against="qrels", max_drop=0.1, relative=True,
                    column="nDCG@10")
    explore, marks = procedure_marks(search, searched["folder"], spec, resamples=1000)
    assert explore == {p["name"]: p["explore"] for p in search["points"]}
    assert marks == {p["name"]: p["mark"] for p in search["points"]}


def test_evalq_gate_re_decides_the_search(searched: dict[str, Any],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    root = searched["outcome"].output
    stored = searched["outcome"].summary["search"]
    assert main(["gate", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"search recommendation: {stored['recommendation']}" in out
    assert "note: the stored summary says" not in out  # re-decided exactly
    done = regate(root, stored_sections_of(root), stored_search(
        searched["folder"].read_manifest_data()["recipe"], None, root / "manifest.json"))
    assert done.decided.search is not None
    assert done.decided.search.model_dump() == stored


def test_the_recommendation_is_the_cheapest_certified(searched: dict[str, Any]) -> None:
    search = _search(searched)
    best = cheapest_certified(search)
    assert search["recommendation"] == best["name"]
    assert searched["outcome"].passed  # a recommendation: exit 0
    point = next(p for p in search["points"] if p["name"] == best["name"])
    per_vector = point["dims"] if point["vectors"].startswith("int8") else 4 * point["dims"]
    ranges = 2 * 4 * point["dims"] if point["vectors"].startswith("int8") else 0
    assert point["index_bytes"] == 150 * per_vector + ranges
