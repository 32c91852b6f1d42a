"""The recipe a results folder's manifest stores, read back as the plan parts that
re-decide it (`evalq gate`, `evalq calibrate`).

The app reads the manifest and hands the stored recipe here; the executors
(``evalq.execute.regate``, ``evalq.execute.calibrate``) then take the
:class:`evalq.plan.run.RunSections` this returns, never the recipe.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evalq.core.errors import InputError
from evalq.core.gates import DEFAULT_MIN_NONZERO, HISTORICAL_METHOD
from evalq.plan.run import RunSections
from evalq.plan.search import SearchPlan, search_plan
from evalq.recipe.schema import Recipe


def stored_recipe(recipe: dict[str, Any], method: str | None) -> dict[str, Any]:
    """The recipe as it decided: results written before ``stats.method`` existed were
    decided by the percentile bootstrap without the sparse-data rule, so that is what
    re-decides them. ``method`` (``evalq gate --method``) overrides, for comparison."""

    stats = recipe.get("stats") or {}
    if not isinstance(stats, dict):  # damaged: left for the recipe's validation to refuse
        return recipe
    options = dict(stats)
    if "method" not in options:
        options["method"] = HISTORICAL_METHOD
        options.setdefault("min_nonzero", 0)
    if method is not None:
        options["method"] = method
        if method == HISTORICAL_METHOD:
            options["min_nonzero"] = 0
        elif options.get("min_nonzero") == 0:
            options["min_nonzero"] = DEFAULT_MIN_NONZERO
    return {**recipe, "stats": options}


def stored_sections(stored: Any, method: str | None, file: Path) -> RunSections:
    """The deciding sections of the recipe ``file`` (a manifest) stores; a hand-edited,
    invalid one is bad input naming the manifest's ``recipe`` field."""
    return _stored(stored, method, file).sections()


def stored_search(stored: Any, method: str | None, file: Path) -> SearchPlan | None:
    """The search of the recipe ``file`` stores, as ``evalq gate`` re-decides it (None
    when the recipe has no ``search:``)."""
    recipe = _stored(stored, method, file)
    if recipe.search is None:
        return None
    return search_plan(recipe.search, recipe.stats.confidence, len(recipe.datasets),
                       variants=recipe.variants)


def _stored(stored: Any, method: str | None, file: Path) -> Recipe:
    try:
        recipe = Recipe.model_validate(stored_recipe(stored or {}, method))
    except ValidationError as exc:
        raise InputError(message=f"the recipe stored in the manifest is invalid: {exc}",
                         file=file, field="recipe",
                         fix="rerun 'evalq run' to write a fresh folder") from None
    return recipe
