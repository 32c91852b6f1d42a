"""HTML, console, markdown, JUnit, compare and history: reads results folders only,
never recomputes.

The parts, their layers and the rules between them: docs/development/architecture.md
(checked by ``make lint``).
"""
