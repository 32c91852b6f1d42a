"""Fault class "a search grid or a keep-index variant written wrong" (issue 32): `search:`
(docs/search.md) and `documents:` (docs/keep-index.md) tried as a hostile user would.
Each case is refused by `evalq plan`, before any model loads, with exit 2 naming the field
and the fix; before these fixes each ended in exit 3 after the run, or planned a run whose
result files overwrite each other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from faultkit import no_traceback, recipe_data, run_cli

from support import recipes

SEARCH = {"weights": ["fp32"], "vectors": [{"quantize": "none"}, {"quantize": "int8"}]}


def _stored(folder: Path) -> dict[str, Any]:
    """A vector file for beir-tiny's 8 documents (its contents are the run's probe's
    business, not the plan's)."""
    np.save(folder / "v.npy", np.ones((8, 384), dtype=np.float32))
    (folder / "ids.txt").write_text("\n".join(["d1", "d2", "d3", "d4", "d5", "d6", "7",
                                               "d8"]))
    return {"path": "v.npy", "ids": "ids.txt"}


def _write(folder: Path, edit: Any) -> Path:
    data = recipe_data(folder)
    data.update(max_queries=40, search={k: list(v) for k, v in SEARCH.items()})
    edit(data, folder)
    return recipes.write(folder / "recipe.yaml", data)


def _split_seed(data: dict[str, Any], folder: Path) -> None:
    data["search"]["split"] = {"seed": -1}


def _stats_seed(data: dict[str, Any], folder: Path) -> None:
    data["stats"]["seed"] = -1


def _probe_seed(data: dict[str, Any], folder: Path) -> None:
    data.pop("search")
    data["candidates"] = [{"name": "kept", "documents": {**_stored(folder),
                                                         "probe": {"seed": -1}}}]


SEEDS = {"search.split.seed": _split_seed, "stats.seed": _stats_seed,
         "candidates.0.documents": _probe_seed}


@pytest.mark.parametrize("field", list(SEEDS))
def test_a_negative_seed_is_refused_by_the_plan(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                field: str) -> None:
    """numpy's generators refuse a negative seed: it was exit 3 ('expected non-negative
    integer'), at plan time for the split, after the whole run for the others."""
    path = _write(tmp_path, SEEDS[field])
    outcome = run_cli(capsys, "plan", str(path))
    assert outcome.code == 2, outcome.err
    assert no_traceback(outcome.err)
    assert field in outcome.err and "greater than or equal to 0" in outcome.err, outcome.err


def _named_like_a_combination(data: dict[str, Any], folder: Path) -> None:
    data["candidates"].append({"name": "s.fp32.int8.full"})


def _index_repeated(data: dict[str, Any], folder: Path) -> None:
    data["search"]["index"] = [{"kind": "faiss", "factory": "HNSW32"},
                               {"kind": "faiss", "factory": "HNSW32"}]


def _index_swept(data: dict[str, Any], folder: Path) -> None:
    data["search"]["index"] = [{"kind": "faiss", "factory": "IVF4,Flat",
                                "sweep": {"nprobe": [1, 2]}}]


COLLISIONS = {
    "a candidate named like a combination": (_named_like_a_combination,
                                             ["candidates.1.name", "s.fp32.int8.full"]),
    "an index option twice": (_index_repeated, ["search", "repeats option 1"]),
    # not a collision: the grid kept one point of it and dropped the sweep without a word
    "an index option with a sweep": (_index_swept, ["search", "option 0 has a sweep"]),
}


@pytest.mark.parametrize("case", list(COLLISIONS))
def test_two_things_of_one_name_are_refused(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str],
                                            case: str) -> None:
    """A combination's run and per-query files are named after it: a variant of the same
    name, or a second identical index option, was planned and its files overwritten."""
    edit, expected = COLLISIONS[case]
    outcome = run_cli(capsys, "plan", str(_write(tmp_path, edit)))
    assert outcome.code == 2, outcome.err
    for text in expected:
        assert text in outcome.err, outcome.err


def test_index_options_that_share_a_label_get_distinct_names() -> None:
    """One factory searched at two nprobe (and factories that differ only in punctuation)
    made one label, so two combinations wrote one file; unique labels stay as they were."""
    from evalq.plan.search import SearchSection, build_grid

    section = SearchSection.model_validate({
        "weights": ["fp32"], "index": [
            {"kind": "faiss", "factory": "IVF4,Flat", "search": {"nprobe": 1}},
            {"kind": "faiss", "factory": "IVF4,Flat", "search": {"nprobe": 4}},
            {"kind": "faiss", "factory": "HNSW32"}]})
    names = [c.name for c in build_grid(section)[0]]
    assert len(set(names)) == len(names) == 3, names
    assert "s.fp32.none.full.faiss-HNSW32" in names


def test_a_point_of_undefined_quality_is_on_no_frontier() -> None:
    """`evalq gate` on a search whose combination has a NaN per-query value (a broken
    query) drew it as optimal (frontier ✓, quality nan): no comparison with NaN is true,
    so nothing dominated it. Its gates fail; the frontier must not offer it either."""
    from evalq.decide.search import Point, pareto_frontier

    points = [Point("cheap", 1.0, 0.90), Point("broken", 2.0, float("nan")),
              Point("dear", 3.0, 0.95), Point("worse", 3.0, 0.80)]
    assert pareto_frontier(points) == ["cheap", "dear"]


def _dims_true(data: dict[str, Any], folder: Path) -> None:
    data["search"]["dims"] = [True]


def _survivors_true(data: dict[str, Any], folder: Path) -> None:
    data["search"]["survivors"] = True


def _variant_dims_true(data: dict[str, Any], folder: Path) -> None:
    data.pop("search")
    data["candidates"] = [{"name": "narrow", "vectors": {"dims": True}}]


BOOLS = {"search.dims.0": _dims_true, "search.survivors": _survivors_true,
         "candidates.0.vectors.dims": _variant_dims_true}


@pytest.mark.parametrize("field", list(BOOLS))
def test_true_is_not_a_count(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                             field: str) -> None:
    """`dims: [true]` planned a search at width 1 (YAML's true read as the integer 1)."""
    outcome = run_cli(capsys, "plan", str(_write(tmp_path, BOOLS[field])))
    assert outcome.code == 2, outcome.err
    assert field in outcome.err, outcome.err


def test_the_printed_per_test_alpha_is_the_family_the_grid_allows() -> None:
    """`survivors: 1000000` over 4 combinations printed a per-test alpha of 2.5e-08, while
    Holm decides a family of at most 4 (at 0.025 / 4)."""
    from evalq.plan.search import SearchSection, search_plan

    section = SearchSection.model_validate({**SEARCH, "dims": [384, 128],
                                            "survivors": 1_000_000})
    plan = search_plan(section, confidence=0.95, datasets=1)
    assert len(plan.combinations) == 4
    assert plan.per_test_alpha == pytest.approx(0.025 / 4)
    assert "Holm over at most 4 survivors" in "\n".join(plan.describe())


def test_a_huge_grid_plans_in_a_readable_line() -> None:
    """A grid of 384 widths printed all 384 on one line of the plan (and 1,000 precisions
    as many): the line now names the count, the first values and the last."""
    from evalq.plan.search import SearchSection, search_plan

    section = SearchSection.model_validate({"weights": ["fp32"],
                                            "dims": list(range(1, 385))})
    first = search_plan(section, confidence=0.95, datasets=1).describe()[0]
    assert "384 combinations" in first and "384 dims (1, 2, 3, 4, 5, 6, …" in first
    assert len(first) < 200, first


def _search_factory(data: dict[str, Any], folder: Path) -> None:
    data["search"]["vectors"] = [{"quantize": "none"}]
    data["search"]["index"] = [{"kind": "faiss", "factory": "HNSW32"},
                               {"kind": "faiss", "factory": "IVF4,PQ50"}]


def _variant_factory(data: dict[str, Any], folder: Path) -> None:
    data.pop("search")
    data["candidates"] = [{"name": "pq", "index": {"kind": "faiss", "factory": "PQ50"}}]


FACTORIES = {"search.index.1.factory": _search_factory,
             "candidates.0.index.factory": _variant_factory}


@pytest.mark.parametrize("field", list(FACTORIES))
def test_a_factory_faiss_cannot_build_at_the_width_stops_the_plan(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str) -> None:
    """PQ50 does not divide MiniLM's 384 dimensions: FAISS refused it only at run time,
    after the reference and every candidate had encoded the corpus."""
    outcome = run_cli(capsys, "plan", str(_write(tmp_path, FACTORIES[field])))
    assert outcome.code == 2, outcome.err
    assert no_traceback(outcome.err)
    assert field in outcome.err and "PQ50" in outcome.err, outcome.err


def _weight_borrowing_both(data: dict[str, Any], folder: Path) -> None:
    data["candidates"] = [{"name": "kept", "documents": "reference",
                           "queries": "reference"}]
    data["search"]["weights"] = ["fp32", "kept"]


def test_a_weight_variant_that_borrows_both_sides_costs_no_encoding(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A weight variant whose documents and queries both come from another variant builds
    no engine and encodes nothing, but the plan counted an encoding for it (2 for 1) and
    its time estimate charged it: the plan says it reuses both sides and counts 0."""
    outcome = run_cli(capsys, "plan", str(_write(tmp_path, _weight_borrowing_both)))
    assert outcome.code == 0, outcome.err
    assert "encodings: 1 (" in outcome.out, outcome.out
    assert "kept reuses both sides" in outcome.out and "0 encodings" in outcome.out, \
        outcome.out


def test_a_stored_search_counts_the_encodings_the_run_spent() -> None:
    """`evalq gate` re-plans the search from the stored recipe: the same count as the run."""
    from evalq.plan.search import SearchSection, search_plan
    from evalq.plan.variant import SearchedVariant

    section = SearchSection.model_validate({**SEARCH, "weights": ["fp32", "kept"]})
    variants = [SearchedVariant(name="fp32"),
                SearchedVariant(name="kept", documents="reference", queries="reference")]
    plan = search_plan(section, confidence=0.95, datasets=2, variants=variants)
    assert plan.encodings == 2 and plan.reused == ("kept",)
    half = [variants[0], SearchedVariant(name="kept", documents="reference")]
    assert search_plan(section, confidence=0.95, datasets=2, variants=half).encodings == 4


def _dims_on_a_variant_lender(data: dict[str, Any], folder: Path) -> None:
    data.pop("search")
    data["candidates"] = [{"name": "short", "documents": "reference",
                           "vectors": {"dims": 128}}]


def _dims_on_a_file(data: dict[str, Any], folder: Path) -> None:
    data.pop("search")
    documents = _stored(folder)
    np.save(folder / "v.npy", np.full((8, 384), 384 ** -0.5, dtype=np.float32))  # unit rows
    data["candidates"] = [{"name": "short", "documents": documents,
                           "vectors": {"dims": 128}}]


@pytest.mark.parametrize("edit", [_dims_on_a_variant_lender, _dims_on_a_file])
def test_vectors_dims_on_a_borrower_is_one_rule_for_variants_and_files(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: Any) -> None:
    """`documents: reference` with `vectors.dims` was refused ("give both the same
    vectors.dims") while a documents file with the same `vectors.dims` was accepted. The
    borrowed vectors are the lender's before any truncation and the borrower's
    vectors.dims truncates both sides in either case, so both plan, and say so."""
    outcome = run_cli(capsys, "plan", str(_write(tmp_path, edit)))
    assert outcome.code == 0, outcome.err
    assert "both sides truncated to vectors.dims 128" in outcome.out, outcome.out
