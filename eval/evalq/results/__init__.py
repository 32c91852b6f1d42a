"""The only reader and writer of results folders: typed schema, lock, snippets, load
results.

The parts, their layers and the rules between them: docs/development/architecture.md
(checked by ``make lint``).
"""
