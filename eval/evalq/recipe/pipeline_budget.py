"""What a recipe's rerank pipelines will score, shown by ``evalq plan`` before anything loads.

A pipeline's cost is the (query, document) pairs its rerankers score: every query of the
slice, times the deepest of its depths (the shallower depths are prefixes of the same
candidate list, so their pairs come from the score cache), times the first-stage rankings
it reranks (a BM25 or run-file stage is one; a dense stage is its reference plus each
candidate), times the reranker variants (reference plus candidates). Cross-encoders score
a few pairs per second on a CPU, so this product is what decides whether a pipeline
recipe takes minutes or hours, and a user should see it before paying for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PipelineBudget:
    """The scoring bound of one pipeline (``queries`` None: the datasets' every query)."""

    name: str
    queries: int | None
    depth: int
    rankings: int
    rerankers: int

    @property
    def pairs(self) -> int | None:
        """At most this many pairs are scored per dataset (None without a query limit)."""
        if self.queries is None:
            return None
        return self.queries * self.depth * self.rankings * self.rerankers

    def describe(self) -> str:
        queries = f"{self.queries} queries" if self.queries is not None else \
            "every query (no max_queries)"
        total = f"at most {self.pairs:,} pairs per dataset" if self.pairs is not None else \
            "pairs grow with the dataset's queries"
        return (f"pipeline {self.name} budget: {queries} × depth {self.depth} × "
                f"{self.rankings} first-stage ranking(s) × {self.rerankers} reranker "
                f"variant(s): {total} to score (cached in scores.sqlite)")


def pipeline_budgets(recipe: Any, max_queries: int | None = None) -> list[PipelineBudget]:
    """One budget per pipeline of ``recipe`` (a parsed :class:`~evalq.recipe.schema.Recipe`),
    at the plan's query limit."""
    queries = max_queries or recipe.max_queries
    out = []
    for spec in recipe.pipelines or []:
        stage = spec.first_stage
        rankings = 1 + len(stage.candidates) if stage.kind == "dense" else 1
        out.append(PipelineBudget(name=spec.name, queries=queries, depth=max(spec.depths),
                                  rankings=rankings,
                                  rerankers=1 + len(spec.reranker.candidates)))
    return out


__all__ = ["PipelineBudget", "pipeline_budgets"]
