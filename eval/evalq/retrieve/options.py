"""Options that search and first stages declare: a variant's ANN ``index:`` and a
pipeline's BM25 first stage.

The recipe composes these models (a part declares its options, the recipe does not define
them for it), so search code reads its own options and never imports the recipe.
"""

from __future__ import annotations

import math
import re
from typing import Any, Literal

from pydantic import Field, field_validator

from evalq.core.options import StrictOptions

# FAISS search-time parameters we pass through ParameterSpace ("efSearch=64,nprobe=16").
# Only names FAISS understands for the index families we document; a typo is caught here.
SEARCH_PARAMS = ("efSearch", "nprobe", "max_codes", "ht", "k_factor")

# What FAISS requires of each (it accepts any number through ParameterSpace and fails,
# or loops, at search): lists to probe and HNSW beam width are counts of at least 1,
# max_codes and ht are limits where 0 means none, k_factor multiplies k.
_AT_LEAST = {"efSearch": 1, "nprobe": 1, "max_codes": 0, "ht": 0}


def _search_param_problem(name: str, value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return "must be a number"
    if not math.isfinite(value):
        return "must be finite"
    if name in _AT_LEAST:
        if value != int(value):
            return "must be a whole number"
        if value < _AT_LEAST[name]:
            return f"must be at least {_AT_LEAST[name]}"
        if value > 2**31 - 1:
            return "is larger than FAISS takes (a 32-bit int)"
    elif value <= 0:
        return "must be positive"
    return None


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
        for name, number in value.items():
            problem = _search_param_problem(name, number)
            if problem:
                raise ValueError(f"index search parameter {name}={number!r}: {problem}")
        return value

    def search_string(self) -> str:
        """The ParameterSpace string, in a fixed order (what the manifest records)."""
        return ",".join(f"{k}={self.search[k]}" for k in sorted(self.search))

    @property
    def exact(self) -> bool:
        return self.factory == "Flat"


class Bm25Options(StrictOptions):
    """bm25s parameters; all of them go into the manifest."""

    k1: float = Field(default=1.2, gt=0, allow_inf_nan=False)
    b: float = Field(default=0.75, ge=0, le=1, allow_inf_nan=False)
    method: Literal["lucene", "robertson", "atire", "bm25l", "bm25+"] = "lucene"
    stemmer: str | None = "english"  # a PyStemmer (Snowball) language, or null
    stopwords: str | None = "en"  # bm25s stopword list name, or null
    lower: bool = True

    # Both names are checked against the library that will receive them, when the recipe
    # is read (a name bm25s does not know failed only once the corpus was tokenized).
    @field_validator("stopwords")
    @classmethod
    def _bm25s_knows(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            from bm25s.tokenization import Tokenizer
        except ImportError:  # the run names the missing extra
            return value
        try:
            Tokenizer(stopwords=value)  # bm25s's own lookup of its stopword lists
        except ValueError as exc:
            raise ValueError(f"bm25s has no stopword list '{value}' ({exc}); use a language "
                             "it ships (en, english, en_plus, de, fr, es, ...) or null") from None
        return value

    @field_validator("stemmer")
    @classmethod
    def _pystemmer_knows(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            import Stemmer
        except ImportError:
            return value
        if value not in Stemmer.algorithms():
            raise ValueError(f"PyStemmer has no stemmer '{value}'; use one of "
                             f"{', '.join(Stemmer.algorithms())}, or null")
        return value
