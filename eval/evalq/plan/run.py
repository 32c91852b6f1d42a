"""What `evalq run`'s deciding executors read, as the recipe states it: the measure lists,
the gate configurations and statistics options, batch sensitivity, rerank pipelines,
report options and the title separator.

:meth:`evalq.recipe.schema.Recipe.sections` makes a :class:`RunSections` from a recipe (the
plan carries it as ``Plan.sections``, and ``evalq gate`` / ``evalq calibrate`` build it
from the recipe a results folder stores), so the summary, the sensitivity gates and the
per-dataset scoring read it and not the recipe. The measure lists are kept as written:
the summary's keys are the recipe's spellings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from evalq.core.options import StrictOptions
from evalq.plan.gates import GateConfig, StatsOptions
from evalq.plan.pipelines import PipelineSpec
from evalq.plan.sensitivity import BatchSensitivity


class ReportOptions(StrictOptions):
    """What reports read from the recipe: which cost the recommendation minimizes, and how
    many words of each shown document the run stores for them (0 = no texts stored)."""

    cost: Literal["weight_bytes", "index_bytes", "throughput"] = "weight_bytes"
    snippet_words: int = Field(default=30, ge=0)


@dataclass(frozen=True)
class RunSections:
    """The recipe's deciding sections for one run, as written (see the module docstring).
    ``reference`` is the reference variant's name."""

    recipe: str
    reference: str
    metrics: tuple[str, ...]
    reference_metrics: tuple[str, ...]
    gates: tuple[GateConfig, ...]
    stats: StatsOptions
    report: ReportOptions
    title_separator: str | None
    pipelines: tuple[PipelineSpec, ...] = ()
    batch_sensitivity: BatchSensitivity | None = None
