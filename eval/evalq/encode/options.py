"""Options the encoding executors declare: the recipe's ``executor:`` (local or Ray).

The recipe composes this model, so the executors read their own options and never import
the recipe.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from evalq.core.options import StrictOptions
from evalq.encode.rayaddress import address_problem


class ExecutorSpec(StrictOptions):
    """``executor:`` of a recipe: where corpus encoding runs.

    ``local`` (default) encodes in this process. ``ray`` cuts the texts into the embedding
    cache's chunks and encodes the missing ones with Ray Data ``map_batches`` on an actor
    pool, ``replicas`` actors each holding one model replica on ``cpus_per_replica`` CPUs
    and ``gpus_per_replica`` GPUs; ``batch_size`` is cache chunks per actor call.
    ``address`` is a running cluster (``ray://host:10001`` or ``auto``); unset starts a
    local one with ``num_cpus`` CPUs. ``max_restarts`` bounds how often Ray restarts a
    failed actor and retries its work.
    """

    type: Literal["local", "ray"] = "local"
    address: str | None = None
    replicas: int = Field(default=1, ge=1)
    cpus_per_replica: float = Field(default=1, gt=0)
    gpus_per_replica: float = Field(default=0, ge=0)
    batch_size: int = Field(default=1, ge=1)
    num_cpus: int | None = Field(default=None, ge=1)
    max_restarts: int = Field(default=3, ge=0)

    @field_validator("address")
    @classmethod
    def _ray_takes_it(cls, value: str | None) -> str | None:
        problem = None if value is None else address_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        """``executor: ray`` is short for ``executor: {type: ray}``."""
        return {"type": value} if isinstance(value, str) else value
