"""Where recipes and dataset manifests are found, from any working folder.

evalq is used from a user's own project, a notebook or its own checkout. What ships with
the package (the built-in ``pydocs`` manifest, the example recipes and their shared
bases) is found by name from any folder. The example recipes live in the repository's
top-level ``recipes/``; the wheel carries that folder as the data package
``evalq/_recipes`` (setup.py maps it), so a checkout reads ``recipes/`` and an installed
evalq reads its own copy. The user's own files come first, so a project can shadow a
built-in name deliberately:

dataset manifests, by name, first hit wins
  1. ``./datasets`` (the working folder)
  2. ``<recipe folder>/datasets`` and ``<recipe folder>/../datasets``
  3. the checkout's ``datasets/`` when evalq runs from its own source tree
  4. the manifests built into the package (``evalq/data/manifests``)

recipes, for ``evalq run X``
  1. ``X`` as a path, when that file exists
  2. a built-in recipe: ``quickstart``, ``quickstart.yaml`` or ``recipes/quickstart.yaml``
     (the last keeps the README's ``evalq run recipes/quickstart.yaml`` working from
     any folder, not only the repository root where it is a plain path)

``include:`` resolves relative to the including file first, then against the built-in
recipes, so a user's recipe can ``include: base/minilm-pydocs.yaml``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
# Where the wheel puts the repository's recipes/ (setup.py: package_dir "evalq._recipes").
SHIPPED_RECIPES = PACKAGE_ROOT / "_recipes"
BUILTIN_DATASETS = PACKAGE_ROOT / "data" / "manifests"

ORIGIN_CWD = "./datasets"
ORIGIN_RECIPE = "recipe folder"
ORIGIN_CHECKOUT = "checkout"
ORIGIN_BUILTIN = "built in"


@dataclass(frozen=True)
class SearchDir:
    """One folder of dataset manifests and why it is searched."""

    path: Path
    origin: str


def _checkout_folder(name: str) -> Path | None:
    """The source tree's top-level folder ``name`` when evalq is imported from a checkout
    (editable install or PYTHONPATH), else None: an installed wheel has no checkout above
    it."""
    for parent in PACKAGE_ROOT.parents:
        if (parent / "pyproject.toml").is_file() and (parent / name).is_dir():
            return parent / name
    return None


def checkout_datasets() -> Path | None:
    """The checkout's ``datasets/`` (test manifests such as beir-tiny), or None."""
    return _checkout_folder("datasets")


def _builtin_recipes() -> Path:
    """The example recipes: the wheel's own copy when evalq is installed (checked first,
    so a wheel installed in a venv inside some checkout still reads what it shipped),
    else the checkout's ``recipes/``. Falls back to the shipped path, which then simply
    holds no recipes."""
    if SHIPPED_RECIPES.is_dir():
        return SHIPPED_RECIPES
    return _checkout_folder("recipes") or SHIPPED_RECIPES


BUILTIN_RECIPES = _builtin_recipes()


def dataset_search_dirs(recipe_path: str | Path | None = None) -> list[SearchDir]:
    """Manifest folders in search order (module docstring); missing ones and repeats are
    dropped, so the list is also what error messages print."""
    candidates = [SearchDir(Path.cwd() / "datasets", ORIGIN_CWD)]
    if recipe_path is not None:
        here = Path(recipe_path).resolve().parent
        candidates += [SearchDir(here / "datasets", ORIGIN_RECIPE),
                       SearchDir(here.parent / "datasets", ORIGIN_RECIPE)]
    checkout = checkout_datasets()
    if checkout is not None:
        candidates.append(SearchDir(checkout, ORIGIN_CHECKOUT))
    candidates.append(SearchDir(BUILTIN_DATASETS, ORIGIN_BUILTIN))
    unique: list[SearchDir] = []
    seen: set[Path] = set()
    for item in candidates:
        if not item.path.is_dir():
            continue
        resolved = item.path.resolve()
        if resolved in seen:
            continue
        seen.add(resolved)
        unique.append(item)
    return unique


def builtin_recipe_names() -> list[str]:
    """Names of the example recipes (``quickstart``, ...)."""
    return sorted(p.stem for p in BUILTIN_RECIPES.glob("*.yaml"))


def builtin_recipe(name: str | Path) -> Path | None:
    """The built-in recipe ``name`` means (``quickstart``, ``quickstart.yaml``,
    ``recipes/quickstart.yaml``), or None."""
    parts = Path(name).parts
    if parts and parts[0] == "recipes":
        parts = parts[1:]
    if not parts or ".." in parts:
        return None
    candidate = BUILTIN_RECIPES.joinpath(*parts)
    if candidate.suffix not in (".yaml", ".yml"):
        candidate = candidate.with_name(candidate.name + ".yaml")
    return candidate if candidate.is_file() else None


def expand_user(path: str | Path) -> Path:
    """``~`` and ``~user`` expanded; a ``~name`` naming no user on this machine is kept as
    written (``Path.expanduser`` raises RuntimeError there, which was exit 3), so the
    caller's "not found" names what the user typed."""
    try:
        return Path(path).expanduser()
    except RuntimeError:
        return Path(path)


def resolve_recipe(path: str | Path) -> Path:
    """The recipe file ``path`` names: the path itself when it exists, else a built-in
    recipe of that name; otherwise the path unchanged, so the loader's "file not found"
    names what the user typed."""
    given = expand_user(path)
    if given.is_file():
        return given
    return builtin_recipe(given) or given


def resolve_include(including_dir: Path, name: str) -> Path:
    """An ``include:`` target: relative to the including file, else a built-in base."""
    local = including_dir / name
    if local.is_file():
        return local
    builtin = BUILTIN_RECIPES / name
    return builtin if builtin.is_file() and not Path(name).is_absolute() else local
