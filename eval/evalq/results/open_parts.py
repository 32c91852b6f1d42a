"""The open parts of a results file that readers descend into, typed where they read.

A writer stores open mappings in a few places (the recipe as run).
The report, ``evalq compare`` and ``evalq calibrate`` read keys inside them; a
hand-edited value of the wrong type there (``encode.documents: true``) must be refused
when the file is parsed (exit 2 naming the file and the field), not met by a report as an
``AttributeError``, which is evalq's own bug (exit 3). Found by the surface fuzzers
(tests/faults/test_fuzz_surfaces.py). :mod:`evalq.results.schema` uses these models.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class Open(BaseModel):
    """An open part (a writer stores more keys than readers need): the keys readers
    descend into are typed, so a wrong-typed one is refused when the file is parsed, not
    met by a report; every other key is kept as stored."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)


class StoredVariant(Open):
    """A variant of the stored recipe, as reports read it (its settings row)."""

    name: str | None = None
    backend: str | None = None
    dtype: str | None = None
    vectors: dict[str, Any] | None = None


class StoredRecipe(Open):
    """The recipe as the manifest stores it (typed in full by ``recipe.Recipe``, which
    results may not import); what reports read of it."""

    name: str | None = None
    description: str | None = None
    metrics: list[str] = Field(default_factory=list)
    reference_metrics: list[str] = Field(default_factory=list)
    stats: dict[str, Any] | None = None
    reference: StoredVariant | None = None
    candidates: list[StoredVariant] = Field(default_factory=list)
