"""Statistics, intervals, gate decisions, summary statistics and calibration: pure
functions of arrays and gate specs, one path for every kind of run.

The parts, their layers and the rules between them: docs/development/architecture.md
(checked by ``make lint``).
"""
