"""Fault class "Python API argument of the wrong kind": each raised a raw error from deep
inside, or did something else than asked.

``evalq.run(42)`` / ``run(None)`` / ``run(b"recipe.yaml")`` / ``run(results)`` and
``output=5`` ended in pathlib's ``TypeError``; ``only='int8-vectors'`` was iterated as
characters ("unknown variant(s) -, 8, c, e, ..."); ``per_query(variant='nope')`` said the
folder was incomplete. Each is now an :class:`InputError` saying what the call takes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from faultkit import recipe_data, run_cli, write_recipe

import evalq
from evalq.app import api
from evalq.core.errors import InputError


class _Started(Exception):
    """Raised where the run would start: the arguments were accepted."""


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def stop(plan: Any, **options: Any) -> None:
        seen.update(options, only=None if plan.only is None else list(plan.only))
        raise _Started

    monkeypatch.setattr(api, "run_recipe", stop)
    return seen


@pytest.mark.parametrize("value", [42, None, b"recipe.yaml", 1.5, ["recipe.yaml"],
                                   object.__new__(evalq.Results)],
                         ids=["int", "None", "bytes", "float", "list", "Results"])
def test_run_says_what_it_takes(value: Any, started: dict[str, Any]) -> None:
    with pytest.raises(InputError) as info:
        evalq.run(value)
    assert "evalq.run() takes a recipe" in info.value.message
    assert info.value.field == "recipe_or_path" and "file path" in (info.value.fix or "")


@pytest.mark.parametrize("value", [5, b"out", "", 1.5])
def test_output_must_be_a_folder_path(tmp_path: Path, value: Any,
                                      started: dict[str, Any]) -> None:
    with pytest.raises(InputError) as info:
        evalq.run(recipe_data(tmp_path), output=value)
    assert info.value.field == "output" and info.value.fix


def test_only_as_a_string_is_one_name(tmp_path: Path, started: dict[str, Any]) -> None:
    with pytest.raises(_Started):
        evalq.run(recipe_data(tmp_path), only="int8-vectors", progress=False)
    assert started["only"] == ["int8-vectors"]
    with pytest.raises(_Started):
        evalq.run(recipe_data(tmp_path), only=("fp32", "int8-vectors"), progress=False)
    assert started["only"] == ["fp32", "int8-vectors"]


@pytest.mark.parametrize("value", [3, [1, 2], {"a": 1}])
def test_only_of_another_kind_is_refused(tmp_path: Path, value: Any,
                                         started: dict[str, Any]) -> None:
    with pytest.raises(InputError) as info:
        evalq.run(recipe_data(tmp_path), only=value)
    assert info.value.field == "only"


@pytest.mark.model
@pytest.mark.slow
def test_per_query_names_an_unknown_variant_or_dataset(tmp_path: Path, capsys) -> None:
    outcome = run_cli(capsys, "run", str(write_recipe(tmp_path)))
    assert outcome.code in (0, 1), outcome.err
    results = evalq.load_results(tmp_path / "out")
    assert len(results.per_query(variant="int8-vectors")) > 0
    for keyword in ("variant", "dataset"):
        with pytest.raises(InputError) as info:
            results.per_query(**{keyword: "nope"})
        assert f"no {keyword} 'nope'" in info.value.message
        assert info.value.field == keyword and "incomplete" not in info.value.message
        assert info.value.fix is not None and "use one of" in info.value.fix
