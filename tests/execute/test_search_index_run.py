"""A search over index options through `evalq run` with the real MiniLM (issue 31): 2
weight formats × (float vectors × {exact, FAISS Flat, FAISS HNSW32 at efSearch 16} + int8
codes searched exactly) on a pydocs slice.

The index axis was first tested on synthetic vectors only; this checks it on a real run:
one encoding per weight variant, every combination's recall@10 against the exact search
of the same vectors and its cost fields (an HNSW graph holds more bytes than the flat
codes), the marks as the search procedure gives them on the written values, a certified
recommendation, and the exact combination's nDCG@10 as trec_eval scores its run file.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from evalq.core.gates import GateSpec
from evalq.data.trec import read_run
from support import recipes
from support.search_runs import (
    assert_ndcg_is_trec_eval,
    cheapest_certified,
    counted_run,
    procedure_marks,
)

pytestmark = [pytest.mark.slow, pytest.mark.model]

QUERIES, DOCS = 120, 150  # 60 confirm queries: identical rankings certify at 0.025 / 3
FLAT = {"kind": "faiss", "factory": "Flat"}
HNSW = {"kind": "faiss", "factory": "HNSW32", "search": {"efSearch": 16}}
RECIPE = recipes.recipe(
    "search-index", queries=QUERIES, docs=DOCS, candidates=[recipes.DYN_INT8],
    metrics=["nDCG@10"], reference_metrics=["overlap@10"],
    gates=[recipes.gate("nDCG@10", "qrels", max_drop="10%")], resamples=1000,
    parity={"enabled": False},
    search={"weights": ["fp32", "dyn-int8"],
            "vectors": [{"quantize": "none"}, {"quantize": "int8", "rescore": 4}],
            "index": [{"kind": "exact"}, FLAT, HNSW], "survivors": 3})
EXACT, FLAT_NAME, HNSW_NAME = ("s.fp32.none.full", "s.fp32.none.full.faiss-Flat",
                               "s.fp32.none.full.faiss-HNSW32-efSearch16")


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return counted_run(tmp_path_factory.mktemp("search-index"), RECIPE)


def _points(searched: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in searched["outcome"].summary["search"]["points"]}


def _top10(searched: dict[str, Any], name: str) -> dict[str, list[str]]:
    run = read_run(searched["outcome"].output / "runs" / "pydocs" / f"{name}.trec")
    return {q: list(docs)[:10] for q, docs in run.items()}


def test_each_weight_variant_is_encoded_once(searched: dict[str, Any]) -> None:
    calls = searched["calls"]
    assert len(calls) == 4 and set(calls.values()) == {1}  # 2 engines × docs, queries
    assert searched["embedded"] <= 2 * (QUERIES + DOCS)
    search = searched["outcome"].summary["search"]
    assert search["encodings"] == search["minimum_encodings"] == 2
    # float vectors × 3 index options, int8 codes searched exactly (an index kind stores
    # its own form of the vectors): 4 per weight variant
    assert sorted(_points(searched)) == sorted(
        f"s.{w}.{v}" for w in ("fp32", "dyn-int8")
        for v in ("none.full", "none.full.faiss-Flat", "none.full.faiss-HNSW32-efSearch16",
                  "int8+rescore4.full"))
    assert search["axes"]["index"] == ["exact", "faiss-Flat", "faiss-HNSW32-efSearch16"]


def test_recall_against_exact_is_what_the_run_files_say(searched: dict[str, Any]) -> None:
    """recall@10 of each combination against the exact float search of the same vectors:
    exact and Flat find the same top 10, HNSW at efSearch 16 what its run file shows."""
    points = _points(searched)
    for weights in ("fp32", "dyn-int8"):
        exact = _top10(searched, f"s.{weights}.none.full")
        for name in (n for n in points if n.startswith(f"s.{weights}.")):
            got = _top10(searched, name)
            hand = np.mean([len(set(got[q]) & set(exact[q])) / len(exact[q]) for q in exact])
            assert points[name]["recall_at_10"] == pytest.approx(hand, abs=1e-9), name
        assert points[f"s.{weights}.none.full"]["recall_at_10"] == 1.0
        assert points[f"s.{weights}.none.full.faiss-Flat"]["recall_at_10"] >= 0.99
        assert 0.0 < points[f"s.{weights}.none.full.faiss-HNSW32-efSearch16"][
            "recall_at_10"] <= 1.0


def test_cost_fields_are_present_and_consistent(searched: dict[str, Any]) -> None:
    points = _points(searched)
    for name, p in points.items():
        assert p["dims"] == 384 and p["cost"] == p["index_bytes"] > 0, name
        assert p["weight_bytes"] is None or p["weight_bytes"] > 0
        assert p["docs_per_s"] > 0 and p["queries_per_s"] > 0
    # exact float search stores the float matrix; int8 codes a quarter plus the ranges
    assert points[EXACT]["index_bytes"] == DOCS * 384 * 4
    assert points["s.fp32.int8+rescore4.full"]["index_bytes"] == DOCS * 384 + 2 * 4 * 384
    # FAISS counts what each index holds: the HNSW graph's links on top of the vectors
    assert points[FLAT_NAME]["index_bytes"] >= DOCS * 384 * 4
    assert points[HNSW_NAME]["index_bytes"] > points[FLAT_NAME]["index_bytes"]
    assert points[HNSW_NAME]["index"] == "faiss-HNSW32-efSearch16"
    # one weight variant's options cost the same bytes whatever its weights
    assert points["s.dyn-int8.none.full.faiss-HNSW32-efSearch16"]["index_bytes"] > \
        points["s.dyn-int8.none.full.faiss-Flat"]["index_bytes"]


def test_marks_are_the_procedure_on_the_written_values(searched: dict[str, Any]) -> None:
    search = searched["outcome"].summary["search"]
    spec = GateSpec(metric="nDCG@10", against="qrels", max_drop=0.1, relative=True,
                    column="nDCG@10")
    explore, marks = procedure_marks(search, searched["folder"], spec, resamples=1000)
    assert explore == {p["name"]: p["explore"] for p in search["points"]}
    assert marks == {p["name"]: p["mark"] for p in search["points"]}
    confirmed = [p for p in search["points"] if p["mark"] != "not confirmed"]
    assert 0 < len(confirmed) <= search["survivors"] <= 3
    assert search["split"]["explore_queries"] + search["split"]["confirm_queries"] == QUERIES


def test_the_recommendation_is_the_cheapest_certified(searched: dict[str, Any]) -> None:
    search = searched["outcome"].summary["search"]
    best = cheapest_certified(search)
    assert search["recommendation"] == best["name"]
    assert _points(searched)[best["name"]]["mark"] == "certified"
    assert searched["outcome"].passed


@pytest.mark.parametrize("name", [EXACT, HNSW_NAME])
def test_ndcg_is_trec_evals_on_the_run_file(searched: dict[str, Any], name: str) -> None:
    assert_ndcg_is_trec_eval(searched, name, queries=QUERIES, docs=DOCS)
