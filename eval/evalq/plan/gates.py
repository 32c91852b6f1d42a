"""The recipe's gates and ``stats:``, declared, and as the decision rule reads them.

:class:`GateConfig` (a recipe gate) and :class:`StatsOptions` (``stats:``) are composed
by the recipe schema and read by the executors that decide (summary, pipelines,
calibration) without importing the recipe. :func:`gate_spec` builds a
:class:`~evalq.core.gates.GateSpec` from a recipe gate (embedding, pooled or pipeline) and
the recipe's ``stats:``, naming the measure's per-query column from the measure registry;
:func:`validate_gate` checks a gate's metric against that registry."""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import Field, model_validator

from evalq.core.errors import InputError
from evalq.core.gates import (
    DEFAULT_METHOD,
    DEFAULT_MIN_NONZERO,
    GateSpec,
    Method,
    parse_max_drop,
)
from evalq.core.options import StrictOptions
from evalq.measure.measures import FAMILIES, Measure
from evalq.measure.registry import parse_measure

# Upper bound that keeps a typo (10^12) from becoming an out-of-memory crash; cutoffs are
# bounded where measures are parsed (metrics.measures.MAX_CUTOFF).
MAX_RESAMPLES = 1_000_000


class StatsOptions(StrictOptions):
    confidence: float = Field(default=0.95, gt=0.5, lt=1)
    resamples: int = Field(default=10_000, ge=100, le=MAX_RESAMPLES)
    seed: int = Field(default=0, ge=0)  # numpy's generators refuse a negative seed
    # Interval method and sparse-data rule of the gates (evalq.decide.intervals;
    # docs/benchmarks.md "Gate calibration"). Results written before these keys existed
    # are re-decided with method percentile, min_nonzero 0: what decided them then.
    method: Method = DEFAULT_METHOD
    min_nonzero: int = Field(default=10, ge=0)


class GateConfig(StrictOptions):
    metric: str
    against: Literal["qrels", "reference"] = "qrels"
    max_drop: str | float | None = None
    min: float | None = None
    stat: Literal["mean", "p1", "min"] = "mean"
    confidence: float | None = Field(default=None, gt=0.5, lt=1)
    variants: list[str] | None = None  # default: every candidate
    # Several datasets: each must pass (per_dataset) or one macro-averaged verdict (pooled).
    over: Literal["per_dataset", "pooled"] = "per_dataset"
    # A variant searched through an index (retrieval kinds, issue 30): which loss the
    # gate judges. model: its exact search against the reference's; index: its run
    # through the index against its own exact search; end_to_end: its run through the
    # index against the reference's exact search (what a variant without index has).
    loss: Literal["model", "index", "end_to_end"] = "end_to_end"

    @model_validator(mode="after")
    def _one_rule(self) -> GateConfig:
        if (self.max_drop is None) == (self.min is None):
            raise ValueError("a gate needs exactly one of 'max_drop' (e.g. 1% or 0.01) or 'min'")
        return self


def validate_gate(spec: GateSpec) -> Measure:
    """Check the gate's metric against the measure registry (config validation calls
    this): it must parse, be measured against what the gate says, and have a direction
    the gate understands. Returns the parsed measure."""
    measure = parse_measure(spec.metric)
    family = FAMILIES[measure.family]
    if family.against != spec.against:
        raise InputError(
            message=f"gate on {spec.metric}: this measure is computed against "
            f"{family.against}, but the gate says against: {spec.against}",
            field="gates.against",
            fix=f"write against: {family.against}",
        )
    if not family.higher_is_better:
        raise InputError(
            message=f"gate on {spec.metric}: gates support measures where higher is better",
            field="gates.metric",
            fix="gate a measure where higher is better",
        )
    return measure


class GateRule(Protocol):
    """A gate as a recipe writes it: ``GateConfig`` (embedding gates) and
    ``PipelineGate`` (pipeline gates) both are one. Read-only members, so a gate whose
    ``against`` is a narrower Literal (frozen pydantic fields) is one too."""

    @property
    def metric(self) -> str: ...
    @property
    def against(self) -> str: ...
    @property
    def max_drop(self) -> str | float | None: ...
    @property
    def min(self) -> float | None: ...
    @property
    def stat(self) -> Literal["mean", "p1", "min"]: ...
    @property
    def confidence(self) -> float | None: ...


def gate_spec(cfg: GateConfig | GateRule, default_confidence: float,
              options: StatsOptions | None = None, *, against: str | None = None) -> GateSpec:
    """A recipe gate as the decision rule reads it; ``options`` (the recipe's ``stats:``)
    supply the interval method and the sparse-data rule (defaults when absent). Every
    kind of gate (embedding, pooled, pipeline) is built here, so all read ``stats:``.
    ``against`` overrides the gate's own (a pipeline's fidelity floor is decided against
    the reference run)."""
    drop, relative = (None, False)
    if cfg.max_drop is not None:
        drop, relative = parse_max_drop(cfg.max_drop)
    method = options.method if options is not None else DEFAULT_METHOD
    min_nonzero = (options.min_nonzero if options is not None
                   else DEFAULT_MIN_NONZERO)
    return GateSpec(metric=cfg.metric, against=against or cfg.against,  # type: ignore[arg-type]
                    max_drop=drop, relative=relative,
                    min=cfg.min, stat=cfg.stat, confidence=cfg.confidence or default_confidence,
                    method=method, min_nonzero=min_nonzero,
                    over=getattr(cfg, "over", "per_dataset"),
                    loss=getattr(cfg, "loss", "end_to_end"),
                    column=parse_measure(cfg.metric).name)
