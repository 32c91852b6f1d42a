"""The one rule for user strings that become file names in a results folder.

Dataset, variant, pipeline, workload and recipe names are written as folder and file
names (``per_query/<dataset>/<variant>.jsonl``, ``pipelines/<pipeline>/``,
``load/steps/<variant>/<workload>.jsonl``). A dataset named ``../x`` once made
``evalq run`` write outside its results folder. So a name that becomes a path must be a
**safe path component**:

- 1 to :data:`MAX_NAME_LENGTH` characters;
- ASCII letters, digits, ``.``, ``_`` and ``-`` only, so no ``/`` or ``\\``, no NUL or
  other control characters, no spaces, no ``:`` (a drive or stream on Windows), no
  characters a shell or a file system treats specially;
- starting with a letter or a digit, so never empty, never ``.`` or ``..``, never
  hidden, never absolute, never an option (``-x``).

The recipe models use :data:`PathName` (pydantic refuses the name at its recipe line,
exit 2); names that do not come through a model (a dataset named by its manifest's file)
are checked with :func:`check_path_name`; and :func:`inside` re-checks at the point of
writing that a joined path stays under its root (one component per name), so a name from
an older folder or a future code path cannot slip past.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field

from evalq.core.errors import InputError

MAX_NAME_LENGTH = 100
PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._\-]*$"
_SAFE = re.compile(PATTERN)
RULE = (f"1-{MAX_NAME_LENGTH} characters of letters, digits, '.', '_' and '-', starting "
        "with a letter or digit (it becomes a file name in the results folder)")


def path_name_problem(name: object) -> str | None:
    """Why ``name`` is not a safe path component, or None when it is."""
    if not isinstance(name, str):
        return f"a name must be a string, got {type(name).__name__}"
    if len(name) > MAX_NAME_LENGTH:
        return f"name of {len(name)} characters is longer than {MAX_NAME_LENGTH}"
    if not _SAFE.fullmatch(name):
        return f"name {name!r} is not a safe file name: use {RULE}"
    return None


def _validate(name: str) -> str:
    problem = path_name_problem(name)
    if problem is not None:
        raise ValueError(problem)
    return name


# The same rule as a pydantic type: the message says the rule; the recipe's JSON schema
# (editors) carries it as a pattern.
PathName = Annotated[str, AfterValidator(_validate),
                     Field(json_schema_extra={"pattern": PATTERN, "maxLength": MAX_NAME_LENGTH})]


def check_path_name(name: object, *, what: str, file: str | Path | None = None,
                    field: str | None = None, fix: str | None = None) -> str:
    """``name`` if it is a safe path component, else an :class:`InputError` (exit 2)."""
    problem = path_name_problem(name)
    if problem is not None:
        raise InputError(message=f"{what}: {problem}", file=file, field=field,
                         fix=fix or f"rename it: {RULE}")
    assert isinstance(name, str)
    return name


def _leaves(name: str) -> bool:
    """Whether ``name`` (one or more ``/``-joined parts) would not stay below its root."""
    parts = name.split("/")
    return any(not part or part in (".", "..") or "\\" in part or "\x00" in part
               or len(part.encode("utf-8", "surrogatepass")) > 255 for part in parts)


def inside(root: Path, *names: str) -> Path:
    """``root / names...``, the result under ``root``: no part empty, ``.`` or ``..``,
    absolute, with ``\\`` or NUL, or over 255 bytes. Looser than :data:`PathName` on
    purpose: evalq composes some names from checked ones (``bm25+fp32@5.jsonl``, a batch
    composition's ``batch-sensitivity/<variant>/<composition>``); what matters here is
    that none leaves the folder."""
    for name in names:
        if _leaves(name):
            raise InputError(message=f"{name!r} cannot be a file name under {root}: it would "
                             "leave the folder", file=root, fix=f"rename it: {RULE}")
    return root.joinpath(*names)
