"""`evalq gate RESULTS_DIR` for pipelines: re-decide every pipeline gate from the
per-query values the run stored under ``pipelines/<name>/per_query/``.

The same decision as the run (``pipeline.combination_gates`` over the same per-query
arrays, the same stats options from the recipe, so ``evalq gate --method`` re-decides
these too), so an unchanged recipe reproduces the run's
verdicts exactly; a recipe whose gates were edited (a margin, a floor, a new gate on a
stored measure) is re-decided without re-running anything. Which combinations exist
(first stage, reranker, depth, kind) is read from the stored summary: the run decided
that, not the gates.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from evalq.core.errors import InputError
from evalq.core.gates import VariantGate
from evalq.execute.pipelines import applicable_gates, combination_gates
from evalq.measure.registry import parse_measure
from evalq.plan.run import RunSections
from evalq.results.folder import RunFolder


@dataclass
class PipelineVerdicts:
    verdicts: dict[str, VariantGate] = field(default_factory=dict)  # by display name
    failed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # verdicts differing from the run's
    # the stored pipeline summaries with every gate and verdict re-decided
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return not self.failed


def regate_pipelines(sections: RunSections, folder: RunFolder,
                     stored_summary: dict[str, Any]) -> PipelineVerdicts:
    """Re-decide the gates of every pipeline of ``sections`` stored in ``folder``."""
    stored = copy.deepcopy(stored_summary.get("pipelines") or {})
    out = PipelineVerdicts(summary=stored)
    for spec in sections.pipelines:
        if spec.name not in stored:
            raise InputError(message=f"the recipe names pipeline '{spec.name}', which this "
                             "folder's summary.json does not hold", file=folder.root /
                             "summary.json", field=f"pipelines.{spec.name}",
                             fix="rerun 'evalq run' to write a fresh folder")
        pipe_folder = RunFolder(folder.root / "pipelines" / spec.name)
        pipe_failed: list[str] = []  # as the run lists them in the pipeline's summary
        for ds_name, ds in stored[spec.name].get("datasets", {}).items():
            for depth_key, at_depth in ds.get("depths", {}).items():
                combos = at_depth["combinations"]
                reference = pipe_folder.read_per_query(ds_name, at_depth["reference"])
                for name, entry in combos.items():
                    if entry["kind"] == "reference":
                        continue
                    values = pipe_folder.read_per_query(ds_name, name)
                    if values.query_ids != reference.query_ids:
                        raise InputError(message=f"per-query rows of {name} and the reference "
                                         "pipeline name different queries",
                                         file=pipe_folder.root / "per_query" / ds_name,
                                         fix="rerun 'evalq run'; the folder was edited")
                    _check_measures(spec, entry["kind"], int(depth_key), values.values,
                                    pipe_folder, ds_name, name)
                    gate = combination_gates(spec, entry["kind"], int(depth_key),
                                             dict(values.values), dict(reference.values),
                                             sections.stats)
                    stored_gate = entry.pop("gate", None) or {}
                    entry["verdict"] = "ungated" if gate is None else gate.verdict
                    if gate is None:
                        continue
                    label = f"pipeline {spec.name} {ds_name} {name}"
                    out.verdicts[label] = gate
                    out.failed.extend(f"{label}: {c.gate} ({c.verdict})"
                                      for c in gate.checks if not c.passed)
                    pipe_failed.extend(f"pipeline {spec.name} {name}: {c.gate} ({c.verdict})"
                                       for c in gate.checks if not c.passed)
                    before = {c["gate"]: c["verdict"] for c in stored_gate.get("checks", [])}
                    now = {c.gate: c.verdict for c in gate.checks}
                    entry["gate"] = gate.to_dict()
                    if before != now:
                        out.changed.append(label)
        stored[spec.name]["passed"], stored[spec.name]["failed_gates"] = (not pipe_failed,
                                                                          pipe_failed)
    return out


def _check_measures(spec: Any, kind: str, depth: int, values: dict[str, Any],
                    pipe_folder: RunFolder, ds_name: str, name: str) -> None:
    """A gate on a measure the run did not store cannot be decided from the folder
    (the same selection of gates as the run: ``pipeline.applicable_gates``)."""
    for gate in applicable_gates(spec, kind, depth):
        measure = parse_measure(gate.metric).name
        if measure not in values:
            raise InputError(message=f"the gate on {measure} cannot be re-decided: the run "
                             f"stored no per-query {measure} for {name}",
                             file=pipe_folder.root / "per_query" / ds_name / f"{name}.jsonl",
                             field=f"pipelines.{spec.name}.gates",
                             fix=f"rerun 'evalq run' with {measure} in the pipeline's "
                             "metrics lists")
