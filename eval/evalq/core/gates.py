"""Gate values: what a gate is (:class:`GateSpec`, from the recipe) and what deciding it
found (:class:`GateCheck`, :class:`VariantGate`). The decisions are in
``evalq.decide.gate``, the recipe's builder (``gate_spec``) in ``evalq.plan.gates``.

The interval methods are named here because a ``GateSpec`` refuses an unknown one;
``evalq.decide.intervals`` implements them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

from evalq.core.errors import InputError

Method = Literal["percentile", "bootstrap-t", "bca", "t", "t-and-bootstrap-t",
                 "share-t-and-bootstrap-t"]
METHODS: tuple[str, ...] = get_args(Method)
DEFAULT_METHOD: Method = "share-t-and-bootstrap-t"
"""Chosen from the calibration table (docs/benchmarks.md "Gate calibration"). A new rule
gets a new name rather than changing an old one, so that a results folder whose stored
``stats.method`` is ``t-and-bootstrap-t`` (the default until the share-bounded spread) is
re-decided by ``evalq gate`` exactly as it was decided."""
DEFAULT_MIN_NONZERO = 10
"""Fewer non-zero differences than this: the sparse-data rule decides, not an interval."""
HISTORICAL_METHOD: Method = "percentile"
"""What results written before ``stats.method`` existed were decided with."""

Against = Literal["qrels", "reference"]
Stat = Literal["mean", "p1", "min"]
Over = Literal["per_dataset", "pooled"]
Loss = Literal["model", "index", "end_to_end"]
"""Which loss a gate judges for a variant searched through an index (issue 30): the
model's (its exact search against the reference's), the index's (its run through the
index against its own exact search), or both together (its run through the index against
the reference's exact search, the default and what a variant without an index has)."""
LOSSES: tuple[str, ...] = ("model", "index", "end_to_end")
Verdict = Literal["pass", "fail", "inconclusive"]
Outcome = Literal["pass", "fail", "inconclusive", "ungated"]
"""A candidate's verdict: ``ungated`` when no gate applies to it (never ``pass``)."""

Figure = float | int | bool | str | None


@dataclass(frozen=True)
class GateSpec:
    """One gate from the recipe. Build drops with :func:`parse_max_drop`."""

    metric: str
    against: Against
    max_drop: float | None = None
    relative: bool = False
    min: float | None = None
    stat: Stat = "mean"
    confidence: float = 0.95
    # How the interval is computed and when sparse data decide instead (evalq.decide.intervals).
    method: str = DEFAULT_METHOD
    min_nonzero: int = DEFAULT_MIN_NONZERO
    # Over a suite of datasets: every dataset on its own, or one macro-averaged verdict.
    over: Over = "per_dataset"
    # The measure's canonical name, the key of its per-query column (``nDCG@10`` for
    # ``ndcg_cut_10``): ``evalq.plan.gates.gate_spec`` reads it off the measure registry,
    # so the decisions never parse a metric. ``None``: the column is named ``metric``.
    column: str | None = None
    loss: Loss = "end_to_end"

    def __post_init__(self) -> None:
        def bad(message: str, fix: str, where: str = "gates") -> InputError:
            return InputError(message=f"gate on {self.metric}: {message}", field=where, fix=fix)

        if self.against not in ("qrels", "reference"):
            raise bad(
                f"against must be qrels or reference, got {self.against!r}",
                "write against: qrels or against: reference",
                "gates.against",
            )
        if (self.max_drop is None) == (self.min is None):
            raise bad(
                "give exactly one of max_drop and min",
                "write max_drop: 1% (allowed drop) or min: 0.9 (floor), not both",
            )
        if self.max_drop is not None:
            if self.against == "reference":
                raise bad(
                    "max_drop needs a reference value to drop from; a measure against the "
                    "reference run has none (the reference scores itself 1.0)",
                    "use a floor instead, e.g. {metric: overlap@10, against: reference, min: 0.9}",
                    "gates.max_drop",
                )
            if not (math.isfinite(self.max_drop) and self.max_drop >= 0.0):
                raise bad(
                    f"max_drop must be a finite number >= 0, got {self.max_drop}",
                    "write max_drop: 0.01 (absolute) or max_drop: 1% (relative)",
                    "gates.max_drop",
                )
            if self.stat != "mean":
                raise bad(
                    "stat p1/min applies to floors only",
                    "drop stat, or use min: instead of max_drop:",
                    "gates.stat",
                )
        else:
            if self.relative:
                raise bad("relative applies to max_drop only", "remove relative", "gates.relative")
            if not math.isfinite(float(self.min)):  # type: ignore[arg-type]
                raise bad(
                    f"min must be a finite number, got {self.min}",
                    "write e.g. min: 0.9",
                    "gates.min",
                )
        if self.stat not in ("mean", "p1", "min"):
            raise bad(
                f"stat must be mean, p1 or min, got {self.stat!r}",
                "write stat: mean (default), p1 or min",
                "gates.stat",
            )
        if self.method not in METHODS:
            raise bad(
                f"unknown interval method {self.method!r}",
                f"write stats: {{method: {DEFAULT_METHOD}}} (one of "
                f"{', '.join(METHODS)})",
                "stats.method",
            )
        if self.loss not in LOSSES:
            raise bad(f"loss must be model, index or end_to_end, got {self.loss!r}",
                      "write loss: end_to_end (default), model or index", "gates.loss")
        if self.over not in ("per_dataset", "pooled"):
            raise bad(
                f"over must be per_dataset or pooled, got {self.over!r}",
                "write over: per_dataset (every dataset must pass) or over: pooled",
                "gates.over",
            )
        if self.over == "pooled" and self.max_drop is None:
            raise bad(
                "over: pooled applies to allowed-drop gates (a macro-average of paired "
                "differences); a floor is checked per dataset",
                "remove over, or use max_drop",
                "gates.over",
            )
        if not 0.5 <= self.confidence < 1.0:
            raise bad(
                f"confidence must lie in [0.5, 1), got {self.confidence}",
                "write e.g. confidence: 0.95",
                "gates.confidence",
            )

    @property
    def label(self) -> str:
        """Human label: ``nDCG@10 vs qrels max_drop 1%``, ``cosine p1 vs reference min 0.99``."""
        metric = self.metric if self.stat == "mean" else f"{self.metric} {self.stat}"
        if self.loss != "end_to_end":
            metric = f"{self.loss} loss: {metric}"
        if self.max_drop is not None:
            drop = f"{self.max_drop * 100:g}%" if self.relative else f"{self.max_drop:g}"
            return f"{metric} vs {self.against} max_drop {drop}"
        return f"{metric} vs {self.against} min {self.min:g}"


_DROP = re.compile(r"^\s*(?P<number>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<percent>%?)\s*$")


def parse_max_drop(
    value: str | float | int, field_name: str = "gates.max_drop"
) -> tuple[float, bool]:
    """``"1%"`` -> ``(0.01, True)`` (relative to the reference mean); ``"0.01"`` or
    ``0.01`` -> ``(0.01, False)`` (absolute, in the measure's units). Raises
    :class:`InputError` on anything else (negative, non-numeric, over 100%)."""
    fix = "write max_drop: 0.01 (absolute, in the measure's units) or max_drop: 1% (relative)"
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InputError(
            message=f"max_drop must be a number or a percentage, got {value!r}",
            field=field_name,
            fix=fix,
        )
    if isinstance(value, (int, float)):
        number = float(value)
        if not (math.isfinite(number) and number >= 0.0):
            raise InputError(
                message=f"max_drop must be finite and >= 0, got {value!r}",
                field=field_name,
                fix=fix,
            )
        return number, False
    match = _DROP.match(value)
    if not match:
        raise InputError(message=f"cannot read max_drop {value!r}", field=field_name, fix=fix)
    number = float(match["number"])
    if match["percent"]:
        if number > 100.0:
            raise InputError(
                message=f"a relative max_drop over 100% ({value!r}) allows anything",
                field=field_name,
                fix=fix,
            )
        return number / 100.0, True
    return number, False


@dataclass(frozen=True)
class GateCheck:
    gate: str
    passed: bool
    verdict: Verdict
    reason: str
    figures: dict[str, Figure] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        """JSON-ready (non-finite figures become None: JSON has no NaN)."""
        out = asdict(self)
        out["figures"] = {k: _json_figure(v) for k, v in self.figures.items()}
        return out


@dataclass(frozen=True)
class VariantGate:
    """``passed``: no check failed (what the run's exit code reads). ``gated``: at least
    one quality gate applied; preflight checks (parity) alone do not make a candidate
    gated, so they can fail it but never certify it."""

    passed: bool
    checks: tuple[GateCheck, ...]
    gated: bool = True

    @property
    def verdict(self) -> Outcome:
        return outcome(self.checks, self.gated)

    def to_dict(self) -> dict[str, object]:
        return {"passed": self.passed, "checks": [c.to_dict() for c in self.checks]}


def outcome(checks: Sequence[GateCheck], gated: bool) -> Outcome:
    """One rule for every kind of run: a failed check fails, an undecided one is
    inconclusive, and only a candidate with at least one quality gate can pass."""
    if any(c.verdict == "fail" for c in checks):
        return "fail"
    if any(not c.passed for c in checks):
        return "inconclusive"
    return "pass" if gated else "ungated"


_SEVERITY: dict[str, int] = {"ungated": 0, "pass": 1, "inconclusive": 2, "fail": 3}


def worst_of(verdicts: Sequence[Outcome]) -> Outcome:
    """Several verdicts on one candidate as one (its own gates and, say, a pipeline's that
    judge it): a fail fails, an undecided one is inconclusive, ungated adds nothing."""
    return max(verdicts, key=_SEVERITY.__getitem__, default="ungated")


def check_from_dict(data: Mapping[str, Any]) -> GateCheck:
    """A stored check (``GateCheck.to_dict``) back as the value the rule reads."""
    return GateCheck(str(data.get("gate", "")), bool(data.get("passed")),
                     data.get("verdict", "fail"), str(data.get("reason", "")),
                     dict(data.get("figures") or {}))


# The label the parity preflight's check carries (execute.summarize): a preflight can fail
# a candidate but never certify it, so it does not make a candidate gated.
PREFLIGHT_LABEL = "parity preflight"


def stored_verdict(verdict: str | None, passed: bool | None,
                   checks: Sequence[Mapping[str, Any]] | None = None) -> Outcome:
    """The verdict a stored result carries. Results written before verdicts were stored
    are decided again by :func:`outcome` from their stored ``checks`` when the caller has
    them (one that failed no check but was not certified reads as inconclusive, one with
    no quality check as ungated); without them only ``passed`` is left (true: pass,
    false: fail)."""
    if verdict:
        return verdict  # type: ignore[return-value]
    if checks is not None:
        gated = any(not str(c.get("gate", "")).startswith(PREFLIGHT_LABEL) for c in checks)
        return outcome([check_from_dict(c) for c in checks], gated)
    return "pass" if passed else "fail"


def summary_passed(verdict: Outcome) -> bool | None:
    """A candidate's ``passed`` in ``summary.json``: ``None`` when ungated."""
    return None if verdict == "ungated" else verdict == "pass"


def _json_figure(value: Figure) -> Figure:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
