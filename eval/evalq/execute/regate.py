"""`evalq gate RESULTS_DIR`: re-decide the gates of a finished run from what it stored.

Uses the recipe recorded in the manifest and the same ``scoring.build_summary`` that
``evalq run`` used, over the stored per-query values (pipeline gates: the same decision
over ``pipelines/<name>/per_query``, ``evalq.execute.pipeline_regate``): the verdicts are
reproduced exactly, and a difference from the stored summary is reported (it means the folder was
edited or written by another evalq version).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalq.core import atomicio
from evalq.core.errors import InputError
from evalq.core.gates import DEFAULT_MIN_NONZERO, HISTORICAL_METHOD
from evalq.execute.pipeline_regate import regate_pipelines
from evalq.execute.summarize import add_pipeline_gates, build_summary
from evalq.recipe.schema import Recipe
from evalq.report.junit import to_junit
from evalq.report.markdown import job_summary
from evalq.results.folder import RunFolder


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


def regate(results: str | Path, *, junit: str | Path | None = None,
           markdown: str | Path | None = None, method: str | None = None) -> bool:
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
    pipeline_verdicts: dict[str, Any] = {}
    if recipe.pipelines:  # pipeline gates, from pipelines/<name>/per_query

        piped = regate_pipelines(recipe, folder, stored)
        pipeline_verdicts = piped.verdicts
        summary = {**summary, "pipelines": piped.summary,
                   "passed": summary["passed"] and piped.passed}
        add_pipeline_gates(summary)  # as the run did: retriever-stage gates judge a candidate
        for label in piped.changed:
            print(f"note: {label}: re-decided verdicts differ from the run's")
    for name, gate in {**verdicts, **pipeline_verdicts}.items():
        mark = ("UNGATED" if gate.verdict == "ungated" else "PASS" if gate.passed
                else "FAIL")
        print(f"{mark}  {name}")
        for check in gate.checks:
            print(f"      [{check.verdict}] {check.gate}: {check.reason}")
    print(f"interval method: {recipe.stats.method} (min_nonzero {recipe.stats.min_nonzero})")
    if stored.get("passed") != summary["passed"]:
        print(f"note: the stored summary says passed={stored.get('passed')}, re-decided "
              f"passed={summary['passed']}")
    if junit is not None:
        try:
            atomicio.write_text(junit, to_junit(verdicts, suite_name=f"evalq.{recipe.name}",
                                                pipelines=pipeline_verdicts))
        except OSError as exc:
            raise InputError(message=f"cannot write the JUnit report ({exc.strerror})",
                             file=junit, field="--junit",
                             fix="give --junit a path in a writable folder") from None
    if markdown is not None:
        try:
            atomicio.write_text(markdown, job_summary(folder.root, manifest, summary))
        except OSError as exc:
            raise InputError(message=f"cannot write the markdown summary ({exc.strerror})",
                             file=markdown, field="--markdown",
                             fix="give --markdown a path in a writable folder") from None
    print("gates " + ("PASSED" if summary["passed"] else "FAILED"))
    return bool(summary["passed"])
