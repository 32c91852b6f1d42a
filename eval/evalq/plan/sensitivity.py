"""The ``batch_sensitivity:`` block of a recipe: which budgets and shuffles to re-encode.

The declaration lives apart from the measurement (:mod:`evalq.execute.sensitivity`), so the
recipe can validate the block without importing the code that runs it, and the executor
reads it without importing the recipe. That named variants are candidates is the recipe's
check (``evalq.recipe.schema``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from evalq.core.options import StrictOptions


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
