"""`evalq load`: serving load tests and capacity planning for the served variants.

config (recipe sections) -> plan checks -> for each served variant: start or attach its
server, parity preflight, sweep each workload (generator, histogram, server stats) ->
knees -> capacity plan and decision table -> ``load/`` in the results folder.
Nothing heavy is imported here: ``evalq.recipe.schema`` imports ``evalq.plan.load``.
"""
