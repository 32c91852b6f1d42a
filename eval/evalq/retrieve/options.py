"""Options that search and first stages declare: a variant's ANN ``index:`` and a
pipeline's BM25 first stage.

The recipe composes these models (a part declares its options, the recipe does not define
them for it), so search code reads its own options and never imports the recipe.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import Field, field_validator

from evalq.core.options import StrictOptions

# FAISS search-time parameters we pass through ParameterSpace ("efSearch=64,nprobe=16").
# Only names FAISS understands for the index families we document; a typo is caught here.
SEARCH_PARAMS = ("efSearch", "nprobe", "max_codes", "ht", "k_factor")

_FACTORY = re.compile(r"^[A-Za-z0-9_,.=+\-x]+$")


class IndexSpec(StrictOptions):
    """``index:`` of a variant: what the deployment's vector index is.

    ``factory`` is a FAISS ``index_factory`` string (``Flat``, ``HNSW32``, ``IVF1024,PQ32``,
    ``IVF4096,SQ8``, ``OPQ16,IVF256,PQ16``); the metric is always inner product.
    ``train_size`` rows (a seeded sample of the corpus) train the indexes that need it;
    ``search`` sets FAISS search parameters (``efSearch``, ``nprobe``...).
    ``deterministic`` builds with one thread: HNSW insertion in parallel depends on thread
    timing, so two runs would otherwise judge two different graphs.
    """

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


class Bm25Options(StrictOptions):
    """bm25s parameters; all of them go into the manifest."""

    k1: float = Field(default=1.2, gt=0)
    b: float = Field(default=0.75, ge=0, le=1)
    method: Literal["lucene", "robertson", "atire", "bm25l", "bm25+"] = "lucene"
    stemmer: str | None = "english"  # a PyStemmer (Snowball) language, or null
    stopwords: str | None = "en"  # bm25s stopword list name, or null
    lower: bool = True
