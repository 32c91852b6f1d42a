"""Recipe keys of the scale-out work: a variant's ANN ``index:`` and the run's ``executor:``.

They live here rather than in :mod:`evalq.config` so that module only gains two fields;
both models are strict like every other recipe block (unknown keys stop the run with the
file, the line and the allowed keys).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

# FAISS search-time parameters we pass through ParameterSpace ("efSearch=64,nprobe=16").
# Only names FAISS understands for the index families we document; a typo is caught here.
SEARCH_PARAMS = ("efSearch", "nprobe", "max_codes", "ht", "k_factor")

_FACTORY = re.compile(r"^[A-Za-z0-9_,.=+\-x]+$")


class IndexSpec(BaseModel):
    """``index:`` of a variant: what the deployment's vector index is.

    ``factory`` is a FAISS ``index_factory`` string (``Flat``, ``HNSW32``, ``IVF1024,PQ32``,
    ``IVF4096,SQ8``, ``OPQ16,IVF256,PQ16``); the metric is always inner product.
    ``train_size`` rows (a seeded sample of the corpus) train the indexes that need it;
    ``search`` sets FAISS search parameters (``efSearch``, ``nprobe``...).
    ``deterministic`` builds with one thread: HNSW insertion in parallel depends on thread
    timing, so two runs would otherwise judge two different graphs.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    factory: str = Field(min_length=1)
    train_size: int | None = Field(default=None, ge=1)
    search: dict[str, int | float] = Field(default_factory=dict)
    seed: int = 0
    deterministic: bool = True

    @field_validator("factory")
    @classmethod
    def _factory_syntax(cls, value: str) -> str:
        if not _FACTORY.match(value):
            raise ValueError(f"index factory {value!r} is not a FAISS index_factory string "
                             "(e.g. Flat, HNSW32, IVF1024,PQ32, IVF4096,SQ8)")
        return value

    @field_validator("search")
    @classmethod
    def _known_params(cls, value: dict[str, Any]) -> dict[str, Any]:
        unknown = sorted(set(value) - set(SEARCH_PARAMS))
        if unknown:
            raise ValueError(f"unknown index search parameter(s) {', '.join(unknown)}; "
                             f"use {', '.join(SEARCH_PARAMS)}")
        return value

    def search_string(self) -> str:
        """The ParameterSpace string, in a fixed order (what the manifest records)."""
        return ",".join(f"{k}={self.search[k]}" for k in sorted(self.search))

    @property
    def exact(self) -> bool:
        return self.factory == "Flat"


class ExecutorSpec(BaseModel):
    """``executor:`` of a recipe: where corpus encoding runs.

    ``local`` (default) encodes in this process. ``ray`` cuts the texts into the embedding
    cache's chunks and encodes the missing ones with Ray Data ``map_batches`` on an actor
    pool, ``replicas`` actors each holding one model replica on ``cpus_per_replica`` CPUs
    and ``gpus_per_replica`` GPUs; ``batch_size`` is cache chunks per actor call.
    ``address`` is a running cluster (``ray://host:10001`` or ``auto``); unset starts a
    local one with ``num_cpus`` CPUs. ``max_restarts`` bounds how often Ray restarts a
    failed actor and retries its work.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["local", "ray"] = "local"
    address: str | None = None
    replicas: int = Field(default=1, ge=1)
    cpus_per_replica: float = Field(default=1, gt=0)
    gpus_per_replica: float = Field(default=0, ge=0)
    batch_size: int = Field(default=1, ge=1)
    num_cpus: int | None = Field(default=None, ge=1)
    max_restarts: int = Field(default=3, ge=0)

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        """``executor: ray`` is short for ``executor: {type: ray}``."""
        return {"type": value} if isinstance(value, str) else value
