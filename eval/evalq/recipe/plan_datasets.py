"""The plan's checks of the recipe's ``datasets:`` entries, before anything is read.

An inline dataset spec is a dict in the recipe schema (a dataset is loaded by the data
part, which owns its model), so before this check ``evalq validate`` said "ok" for an
inline spec that ``evalq run`` then refused when it loaded it: an unknown ``stream:``
key, ``stream`` on a source that is loaded whole, a dataset name with ``../`` in it. The
plan now parses every inline spec with the loader's own parser
(:func:`evalq.data.manifest.parse_spec`), so validate and run refuse the same things at
the same line; and every dataset's name, inline or from its manifest, is checked as a
file name (:mod:`evalq.core.names`), since it becomes a folder in the results.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalq.core.errors import InputError
from evalq.core.locations import dataset_search_dirs
from evalq.data.manifest import dataset_name, find_manifests, parse_spec
from evalq.recipe.plan_variants import Problems


def recipe_manifests(path: Path) -> dict[str, Any]:
    """The dataset manifests a recipe's names resolve to, by name; none when the search
    itself fails (the dataset loader reports that, with its own message)."""
    try:
        return find_manifests([d.path for d in dataset_search_dirs(path)])
    except InputError:
        return {}


def check_datasets(recipe: Any, path: Path, problems: Problems) -> None:
    """Each inline spec parses as the loader will parse it; each name is a safe file name."""
    manifests: dict[str, Any] | None = None
    for i, entry in enumerate(recipe.datasets):
        key = ("datasets", i)
        if isinstance(entry, dict):
            try:
                spec = parse_spec(entry)
            except InputError as exc:
                problems.add_error(key, exc)
                continue
            where: Path | None = None
        else:
            if manifests is None:
                manifests = recipe_manifests(path)
            found = manifests.get(entry)
            if found is None:  # a path to a manifest, or unknown: the loader reports it
                continue
            where, spec = found
        try:
            dataset_name(spec, where)
        except InputError as exc:
            if where is None:
                problems.add_error((*key, "name"), exc)
            else:
                problems.items.append(exc)
