"""The plan: what a run will do, resolved and checked (``evalq.plan.types``).

Built by :func:`evalq.recipe.plan.build_plan` and read by the executors, which import
these declarations, not the recipe. See ``docs/development/architecture.md``.
"""
