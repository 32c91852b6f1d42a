"""The ``batch_sensitivity:`` block of a recipe: which budgets and shuffles to re-encode.

The schema lives apart from the measurement (:mod:`evalq.execute.sensitivity`), so the recipe can
validate the block without importing the code that runs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator

from evalq.core.errors import InputError
from evalq.core.options import StrictOptions

if TYPE_CHECKING:
    from evalq.recipe.schema import Recipe
    from evalq.recipe.yamlsource import Located


class BatchSensitivity(StrictOptions):
    """The recipe block. Presence turns the measurement on."""

    batch_tokens: list[int] = Field(default_factory=lambda: [512, 2048, 8192], min_length=1)
    shuffles: int = Field(default=2, ge=0, le=64)
    seed: int = Field(default=0, ge=0)
    max_queries: int | None = Field(default=None, ge=1)
    max_docs: int | None = Field(default=None, ge=1)
    # Default: every candidate whose encoder is declared batch-dependent (or unverified).
    variants: list[str] | None = None
    # worst: a candidate passes only under every composition; as-run: report, gate as run.
    verdict: Literal["worst", "as-run"] = "worst"

    @field_validator("batch_tokens")
    @classmethod
    def _budgets(cls, value: list[int]) -> list[int]:
        small = [b for b in value if b < 16]
        if small:
            raise ValueError(f"batch_tokens must each be at least 16 padded tokens, got "
                             f"{small}")
        if len(set(value)) != len(value):
            raise ValueError(f"batch_tokens lists a budget twice: {value}")
        return value

    def check_variants(self, recipe: Recipe, located: Located, file: Path) -> None:
        """Called once the recipe parsed: named variants must be candidates."""
        candidates = [c.name for c in recipe.candidates]
        for i, name in enumerate(self.variants or []):
            if name not in candidates:
                where_file, line = located.where(("batch_sensitivity", "variants", i))
                raise InputError(
                    message=f"batch_sensitivity.variants names '{name}', which is not a "
                    "candidate", file=where_file or file, line=line,
                    field=f"batch_sensitivity.variants.{i}",
                    fix=f"name one of: {', '.join(candidates) or '(no candidates)'}")
