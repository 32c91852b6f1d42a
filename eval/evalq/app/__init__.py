"""The CLI (a command table), the Python API (``evalq.run``, ``evalq.load_results``),
``evalq init`` and the commands' output: the only part that prints and maps exceptions to
exit codes.

The parts, their layers and the rules between them: docs/development/architecture.md
(checked by ``make lint``).
"""
