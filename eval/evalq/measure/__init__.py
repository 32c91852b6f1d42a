"""Measures against qrels (``judged``), against the reference run (``reference``) and of
reranker scores (``fidelity``), and their registry.

The parts, their layers and the rules between them: docs/development/architecture.md
(checked by ``make lint``).
"""
