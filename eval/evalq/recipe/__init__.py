"""The recipe schema (composed from the options the other parts declare), YAML with
``include:``, gates as ``GateSpec``, and Recipe → Plan with every error found at once.

The parts, their layers and the rules between them: docs/development/architecture.md
(checked by ``make lint``).
"""
