"""Token-budget batching, the embedding cache, parity, pair scoring and the score cache,
the executors (local, Ray).

The parts, their layers and the rules between them: docs/development/architecture.md
(checked by ``make lint``).
"""
