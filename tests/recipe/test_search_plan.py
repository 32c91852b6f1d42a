"""The recipe's ``search:`` section at plan time (issue 31): the grid and its figures, and
every kind of bad input refused before anything loads (exit 2, naming field and fix)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evalq.app.cli import main
from evalq.core.errors import InputError
from evalq.engines.capability import DeviceInfo
from evalq.plan.search import SearchSection, build_grid
from evalq.recipe.plan import PlanError, build_plan, describe_plan
from evalq.recipe.schema import load_recipe_source
from support import recipes

SEARCH = {"weights": ["fp32", "dyn-int8"],
          "vectors": [{"quantize": "none"}, {"quantize": "int8", "rescore": 4},
                      {"quantize": "binary", "rescore": 10}],
          "dims": [384, 256]}


def _recipe(tmp_path: Path, search: dict[str, Any] | None = None, **extra: Any) -> Path:
    data = recipes.recipe(
        "grid", cache=tmp_path / "cache", queries=extra.pop("queries", 150), docs=300,
        candidates=extra.pop("candidates", [recipes.DYN_INT8]),
        gates=extra.pop("gates", [recipes.gate("nDCG@10", "qrels", max_drop="2%")]),
        search=SEARCH if search is None else search, **extra)
    return recipes.write(tmp_path / "grid.yaml", data)


def _plan(path: Path, **kwargs: Any) -> Any:
    loaded = load_recipe_source(path)
    return build_plan(loaded.recipe, loaded.path, located=loaded.located,
                      detect=lambda: DeviceInfo("cpu"), **kwargs)


def _problems(path: Path, **kwargs: Any) -> str:
    with pytest.raises(InputError) as err:
        _plan(path, **kwargs)
    return str(err.value)


def test_the_plan_states_the_grid_encodings_split_and_alpha(tmp_path: Path) -> None:
    plan = _plan(_recipe(tmp_path))
    search = plan.search
    assert len(search.combinations) == 2 * 3 * 2
    assert search.encodings == 2  # one per weight variant × dataset, not per dims
    assert search.alpha == pytest.approx(0.025)  # the gates' own one-sided level
    assert search.per_test_alpha == pytest.approx(0.025 / 3)
    names = [c.name for c in search.combinations]
    assert len(set(names)) == len(names)
    assert "s.dyn-int8.int8+rescore4.256" in names
    text = describe_plan(plan)
    assert "search: 12 combinations = 2 weights" in text
    assert "encodings: 2" in text
    assert "explore 0.5 / confirm 0.5" in text and "Holm over at most 3 survivors" in text
    assert "per-test alpha 0.008333" in text
    assert "450 texts per encoding" in text  # 150 queries + 300 documents
    assert "exits 0 when it certifies a combination" in text


def test_database_options_keep_their_tables_under_the_cache(tmp_path: Path) -> None:
    """As a variant's index does: the next run of the grid reuses the tables and shards
    (``--no-cache``: a temporary folder; a folder of the option's own: as given)."""
    own = str(tmp_path / "mine")
    grid = {"weights": ["fp32"], "vectors": [{"quantize": "none"}],
            "index": [{"kind": "pgvector", "allow_root": True},
                      {"kind": "qdrant"}, {"kind": "qdrant", "path": own,
                                           "search_params": {"hnsw_ef": 8}}]}
    path = _recipe(tmp_path, grid)
    homes = [c.index for c in _plan(path).search.combinations]
    vdb = tmp_path / "cache" / "vdb"
    assert Path(homes[0].data_dir).parent == vdb
    assert Path(homes[1].path).parent == vdb and homes[2].path == own
    loose = [c.index for c in _plan(path, use_cache=False).search.combinations]
    assert loose[0].data_dir is None and loose[1].path is None and loose[2].path == own


def test_alpha_and_survivors_as_written(tmp_path: Path) -> None:
    plan = _plan(_recipe(tmp_path, {**SEARCH, "alpha": 0.05, "survivors": 5}))
    assert plan.search.alpha == 0.05 and plan.search.per_test_alpha == pytest.approx(0.01)


def test_index_options_pair_with_float_vectors_only() -> None:
    section = SearchSection.model_validate(
        {"weights": ["a"], "vectors": [{"quantize": "none"}, {"quantize": "int8"}],
         "index": [{"kind": "exact"}, {"kind": "faiss", "factory": "HNSW32"}]})
    combos, skipped = build_grid(section)
    assert skipped == 1  # faiss × int8
    assert [c.name for c in combos] == ["s.a.none.full", "s.a.none.full.faiss-HNSW32",
                                        "s.a.int8.full"]


def test_one_factory_at_two_search_settings_is_two_combinations() -> None:
    hnsw = {"kind": "faiss", "factory": "HNSW32"}
    section = SearchSection.model_validate(
        {"weights": ["a"], "index": [{**hnsw, "search": {"efSearch": 16}},
                                     {**hnsw, "search": {"efSearch": 64}}]})
    assert [c.name for c in build_grid(section)[0]] == [
        "s.a.none.full.faiss-HNSW32-efSearch16", "s.a.none.full.faiss-HNSW32-efSearch64"]
    pg = {"kind": "pgvector", "dsn": "postgresql://h/db"}  # where it lives: not named
    section = SearchSection.model_validate(
        {"weights": ["a"], "index": [pg, {**pg, "ef_search": 16}, {**pg, "index": "none"}]})
    assert [c.index_label for c in build_grid(section)[0]] == [
        "pgvector-0", "pgvector-ef_search16", "pgvector-indexnone"]


@pytest.mark.parametrize(("search", "needles"), [
    ({**SEARCH, "colour": ["red"]}, ["unknown key 'colour'", "search.colour"]),
    ({**SEARCH, "weights": []}, ["search.weights", "at least 1"]),
    ({**SEARCH, "dims": []}, ["search.dims", "at least 1"]),
    ({**SEARCH, "dims": [0]}, ["search.dims.0", "greater than or equal to 1"]),
    ({**SEARCH, "vectors": [{"quantize": "none", "rescore": 4}]},
     ["rescore needs quantize"]),
    ({**SEARCH, "vectors": [{"quantize": "float8"}]}, ["search.vectors.0.quantize"]),
    ({**SEARCH, "dims": [256, 256]}, ["repeats 256"]),
    ({**SEARCH, "index": [{"kind": "faiss", "factory": "Flat"}] * 2},
     ["search.index repeats option 1"]),
    ({**SEARCH, "split": {"explore": 1.0}}, ["search.split.explore"]),
])
def test_bad_sections_are_refused_naming_the_field(tmp_path: Path, search: dict[str, Any],
                                                   needles: list[str]) -> None:
    text = _problems(_recipe(tmp_path, search))
    for needle in needles:
        assert needle in text, text


def test_a_weight_that_is_no_variant(tmp_path: Path) -> None:
    text = _problems(_recipe(tmp_path, {**SEARCH, "weights": ["fp32", "fp16"]}))
    assert "search.weights names 'fp16', which is not a variant" in text
    assert "search.weights.1" in text and "name one of: fp32, dyn-int8" in text


def test_a_weight_variant_with_its_own_vectors(tmp_path: Path) -> None:
    text = _problems(_recipe(tmp_path, candidates=[recipes.DYN_INT8, recipes.INT8_VECTORS],
                             search={**SEARCH, "weights": ["fp32", "int8-vectors"]}))
    assert "weight variant 'int8-vectors' sets vectors or index" in text
    assert "search.vectors" in text


def test_dims_wider_than_the_model(tmp_path: Path) -> None:
    text = _problems(_recipe(tmp_path, {**SEARCH, "dims": [384, 512]}))
    assert "search.dims 512 exceed the model's width 384" in text


def test_no_drop_gate_to_certify_against(tmp_path: Path) -> None:
    text = _problems(_recipe(tmp_path, gates=[recipes.gate("overlap@10", "reference",
                                                           min=0.9)]))
    assert "at least one allowed drop against qrels" in text and "max_drop" in text


def test_a_split_that_leaves_too_few_to_confirm(tmp_path: Path) -> None:
    text = _problems(_recipe(tmp_path, queries=16))
    assert "with max_queries 16" in text and "confirming needs at least 10" in text
    assert "search.split.explore" in text


def test_dollars_need_a_price(tmp_path: Path) -> None:
    text = _problems(_recipe(tmp_path, {**SEARCH, "cost": "dollars_per_million_queries"}))
    assert "needs a price per replica-hour" in text and "capacity" in text


def test_a_large_grid_needs_yes_to_run(tmp_path: Path) -> None:
    path = _recipe(tmp_path, {**SEARCH, "max_combinations": 10})
    assert len(_plan(path).search.combinations) == 12  # printing the plan never refuses
    text = _problems(path, confirm_large=False)
    assert "12 combinations, more than search.max_combinations 10" in text
    assert "--yes" in text and "search.max_combinations" in text
    assert _plan(path, confirm_large=True).search is not None


def test_evalq_run_refuses_the_large_grid_with_exit_2(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    path = _recipe(tmp_path, {**SEARCH, "max_combinations": 10})
    assert main(["run", str(path), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "search.max_combinations" in err and "--yes" in err
    assert not (tmp_path / "out" / "manifest.json").exists()  # refused before any work


def test_validate_exits_2_on_bad_search(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = _recipe(tmp_path, {**SEARCH, "weights": ["nope"]})
    assert main(["validate", str(path)]) == 2
    assert "search.weights" in capsys.readouterr().err


def test_plan_error_lists_every_search_problem_at_once(tmp_path: Path) -> None:
    path = _recipe(tmp_path, {**SEARCH, "weights": ["nope"], "dims": [999]}, queries=12)
    with pytest.raises(PlanError) as err:
        _plan(path)
    assert len(err.value.problems) >= 3


def test_the_shipped_recipe_plans_18_combinations() -> None:
    root = Path(__file__).resolve().parents[2]
    plan = _plan(root / "recipes" / "cheapest.yaml")
    assert len(plan.search.combinations) == 18 and plan.search.encodings == 3
    assert set(plan.search.section.weights) == {"fp32", "ov-int8", "ort-int8"}


def test_only_must_keep_the_weight_variants(tmp_path: Path) -> None:
    path = _recipe(tmp_path, candidates=[recipes.DYN_INT8, {"name": "other"}])
    text = _problems(path, only=["other"])
    assert "search.weights names 'dyn-int8', which --only left out" in text
    assert _plan(path, only=["dyn-int8"]).search is not None


def test_a_search_without_candidates_is_not_vacuous(tmp_path: Path) -> None:
    """The reference alone can be searched (its widths and precisions): the gates then
    judge the combinations, so "gates but no candidates" does not apply."""
    plan = _plan(_recipe(tmp_path, {**SEARCH, "weights": ["fp32"]}, candidates=[]))
    assert len(plan.search.combinations) == 6 and plan.search.encodings == 1
