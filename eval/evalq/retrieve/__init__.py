"""Exact, sharded and ANN search, vector quantization and the BM25 first stage:
rankings and vectors in, rankings out.

The parts, their layers and the rules between them: docs/development/architecture.md
(checked by ``make lint``).
"""
