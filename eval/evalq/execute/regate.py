"""`evalq gate RESULTS_DIR`: re-decide the gates of a finished run from what it stored.

Uses the recipe recorded in the manifest and the same ``scoring.build_summary`` that
``evalq run`` used, over the stored per-query values (pipeline gates: the same decision
over ``pipelines/<name>/per_query``, ``evalq.execute.pipeline_regate``): the verdicts are
reproduced exactly, and a difference from the stored summary is reported (it means the folder was
edited or written by another evalq version). :func:`regate` returns what it decided; the
app (``evalq.app.gate_command``) prints it and writes the JUnit and markdown outputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalq.core.errors import InputError
from evalq.core.gates import DEFAULT_MIN_NONZERO, HISTORICAL_METHOD, VariantGate
from evalq.execute.pipeline_regate import regate_pipelines
from evalq.execute.summarize import build_summary, with_pipelines
from evalq.recipe.schema import Recipe
from evalq.results.folder import RunFolder, stored_form
from evalq.results.schema import RunSummary


def stored_recipe(recipe: dict[str, Any], method: str | None) -> dict[str, Any]:
    """The recipe as it decided: results written before ``stats.method`` existed were
    decided by the percentile bootstrap without the sparse-data rule, so that is what
    re-decides them. ``method`` (``evalq gate --method``) overrides, for comparison."""

    options = dict(recipe.get("stats") or {})
    if "method" not in options:
        options["method"] = HISTORICAL_METHOD
        options.setdefault("min_nonzero", 0)
    if method is not None:
        options["method"] = method
        if method == HISTORICAL_METHOD:
            options["min_nonzero"] = 0
        elif options.get("min_nonzero") == 0:
            options["min_nonzero"] = DEFAULT_MIN_NONZERO
    return {**recipe, "stats": options}


@dataclass(frozen=True)
class Regated:
    """What ``evalq gate`` re-decided; the app prints it and writes the CI outputs."""

    decided: RunSummary  # the re-decided summary (pipelines folded in)
    verdicts: dict[str, VariantGate]  # by candidate
    pipeline_verdicts: dict[str, VariantGate]  # by pipeline combination's display name
    recipe_name: str
    manifest: dict[str, Any]
    root: Path  # the results folder
    stored_passed: Any  # what the stored summary says
    changed: tuple[str, ...] = ()  # pipeline verdicts that differ from the run's

    @property
    def passed(self) -> bool:
        return self.decided.passed

    @property
    def summary(self) -> dict[str, Any]:
        """The re-decided summary as ``summary.json`` would hold it."""
        return stored_form(self.decided)


def regate(results: str | Path, *, method: str | None = None) -> Regated:
    folder = RunFolder(results)
    manifest = folder.read_manifest_data()
    stored = folder.read_summary_data()
    try:
        recipe = Recipe.model_validate(stored_recipe(manifest["recipe"], method))
    except Exception as exc:  # a hand-edited manifest is bad input, not our bug
        raise InputError(message=f"the recipe stored in the manifest is invalid: {exc}",
                         file=folder.root / "manifest.json", field="recipe",
                         fix="rerun 'evalq run' to write a fresh folder") from None
    try:
        summary, verdicts = build_summary(recipe, manifest["variants"], folder)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        # The run wrote these files; what build_summary cannot read was cut or edited.
        raise InputError(message=f"the folder is incomplete or was edited ({type(exc).__name__}"
                         f": {exc})", file=folder.root,
                         fix="rerun 'evalq run' to write a fresh folder") from None
    pipeline_verdicts: dict[str, VariantGate] = {}
    changed: tuple[str, ...] = ()
    if recipe.pipelines:  # pipeline gates, from pipelines/<name>/per_query

        piped = regate_pipelines(recipe, folder, stored)
        pipeline_verdicts, changed = piped.verdicts, tuple(piped.changed)
        # as the run did: retriever-stage gates judge a candidate
        summary = with_pipelines(summary, piped.summary, piped.passed)
    return Regated(decided=summary, verdicts=verdicts, pipeline_verdicts=pipeline_verdicts,
                   recipe_name=recipe.name, manifest=manifest, root=folder.root,
                   stored_passed=stored.get("passed"), changed=changed)
