"""The ``search`` part of ``summary.json``: a grid search's split, its error control,
every configuration with its cost, quality and mark, the Pareto frontier and the one
recommendation (:mod:`evalq.decide.search` decides the marks).

Kept apart from :mod:`evalq.results.parts` because it is read by its own report sections
and written by one executor; its shape is the contract between them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from evalq.results.parts import Part

Mark = Literal["certified", "failed", "inconclusive", "not confirmed"]
ExploreVerdict = Literal["pass", "fail", "inconclusive"]


class SearchSplit(Part):
    """How the queries were split, once, before anything was ranked."""

    seed: int
    explore_fraction: float
    explore_queries: int  # summed over datasets
    confirm_queries: int


class SearchPoint(Part):
    """One configuration of the grid: a weight variant × vector precision × dims (×
    index options). ``quality`` is the first gate's metric on the explore queries (what
    the frontier is drawn from); the mark comes from the confirm queries only."""

    name: str
    weights: str  # the weight variant (a recipe variant's name)
    vectors: str  # none, int8, int8+rescore4, binary+rescore10, ...
    dims: int
    index: str | None = None  # an index kind's short description, None = exact search
    cost: float
    weight_bytes: int | None = None
    index_bytes: int | None = None
    docs_per_s: float | None = None
    queries_per_s: float | None = None
    dollars_per_million_queries: float | None = None
    # recall@10 against the exact float search of the same vectors and width, averaged
    # over datasets: what the index or the stored codes lose (None: an older run)
    recall_at_10: float | None = None
    quality: float | None
    explore: ExploreVerdict
    mark: Mark
    alpha: float | None = None  # the one-sided level it was last decided at (confirmed)
    reasons: list[str] = Field(default_factory=list)  # the failing gates' reasons
    frontier: bool = False


class SearchSummary(Part):
    """The whole search: what it cost, how it kept its error rate, what it found."""

    axes: dict[str, list[str]]  # axis name -> its values as written
    cost: str  # what ``cost`` is: weight_bytes, index_bytes, docs_per_s, ...
    quality: str  # the metric ``quality`` is, e.g. nDCG@10
    alpha: float  # family-wise, one-sided
    correction: Literal["holm"]
    survivors: int  # how many configurations were confirmed (the family's size)
    split: SearchSplit
    points: list[SearchPoint]
    frontier: list[str]  # names on the Pareto frontier, cheapest first
    recommendation: str | None  # the cheapest certified point; None: nothing certified
    encodings: int  # encodings the search spent (one per weight variant × dataset)
    minimum_encodings: int  # what the grid needs at least
