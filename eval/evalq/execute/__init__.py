"""The executors that take a plan and a results folder: evaluate, pipelines, batch
sensitivity, streamed runs, regate, calibrate, the load test.

The parts, their layers and the rules between them: docs/development/architecture.md
(checked by ``make lint``).
"""
