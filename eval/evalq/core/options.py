"""The base of every recipe block's options model, whichever part declares it.

Recipes are hand-written YAML, so the options models are strict in the two ways pydantic
is not by default: an unknown key is refused (``extra="forbid"``: a typo would otherwise
silently keep the default), and ``true`` / ``false`` are refused where a number is
expected (pydantic reads ``true`` as 1; in a recipe that is always a slip, such as
``max_queries: true`` or ``depths: [true]``). One base for every part, so the recipe's
own blocks, pipelines, load tests, scale-out and batch sensitivity refuse the same slips.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import AfterValidator, BaseModel, ConfigDict, model_validator


def _is_number_field(annotation: Any) -> bool:
    args = {annotation, *getattr(annotation, "__args__", ())}
    return bool(args & {int, float}) and bool not in args


class StrictOptions(BaseModel):
    """Frozen, no unknown keys, no booleans where a number belongs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @model_validator(mode="before")
    @classmethod
    def _no_bools_as_numbers(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, value in data.items():
                info = cls.model_fields.get(name) if isinstance(name, str) else None
                if isinstance(value, bool) and info and _is_number_field(info.annotation):
                    raise ValueError(f"'{name}' must be a number, not {str(value).lower()}")
        return data


def at_most(most: float, name: str, why: str, fix: str) -> AfterValidator:
    """An option's upper bound, refused saying what the option does and what to use
    instead (``le=`` says only the number, and the recipe's fix for it points at the key
    reference), and stated in the schema as its ``maximum`` (so the generated key reference
    shows it, from this one number). For options that multiply the work of every query
    (vectors.rescore, pgvector's rerank, Qdrant's oversampling), where a value far past
    any use planned and then quietly searched everything."""
    def check(value: float) -> float:
        if value > most:
            raise ValueError(f"{name} is at most {most:g}, not {value:g} ({why}); fix: {fix}")
        return value
    return _Bounded(check, most)


@dataclass(frozen=True)
class _Bounded(AfterValidator):
    """An AfterValidator that also writes its bound into the JSON schema."""

    most: float = 0.0

    def __get_pydantic_json_schema__(self, schema: Any, handler: Any) -> dict[str, Any]:
        return {**handler(schema), "maximum": self.most}
