"""``evalq plan`` shows what each rerank pipeline will score before anything loads."""

from __future__ import annotations

from pathlib import Path

from evalq.recipe.pipeline_budget import PipelineBudget, pipeline_budgets
from evalq.recipe.plan import describe_plan, plan_file
from evalq.recipe.schema import load_recipe

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "rerank-pipeline.yaml"


def test_each_pipeline_budget_is_queries_depth_rankings_and_rerankers() -> None:
    recipe = load_recipe(RECIPE)
    budgets = {b.name: b for b in pipeline_budgets(recipe)}
    assert set(budgets) == {p.name for p in recipe.pipelines}
    for spec in recipe.pipelines:
        b = budgets[spec.name]
        rankings = 1 + len(spec.first_stage.candidates) if spec.first_stage.kind == "dense" \
            else 1
        assert (b.queries, b.depth, b.rankings, b.rerankers) == (
            recipe.max_queries, max(spec.depths), rankings, 1 + len(spec.reranker.candidates))
        assert b.pairs == recipe.max_queries * max(spec.depths) * rankings * b.rerankers
    # a command-line query limit replaces the recipe's
    assert {b.queries for b in pipeline_budgets(recipe, max_queries=7)} == {7}


def test_the_plan_prints_every_pipeline_budget() -> None:
    text = describe_plan(plan_file(RECIPE))
    for b in pipeline_budgets(load_recipe(RECIPE)):
        assert f"pipeline {b.name} budget:" in text and f"at most {b.pairs:,} pairs" in text


def test_without_a_query_limit_the_budget_says_it_grows_with_the_dataset() -> None:
    b = PipelineBudget(name="p", queries=None, depth=100, rankings=1, rerankers=2)
    assert b.pairs is None and "every query (no max_queries)" in b.describe()
