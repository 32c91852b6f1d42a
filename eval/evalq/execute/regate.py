"""`evalq gate RESULTS_DIR`: re-decide the gates of a finished run from what it stored.

Uses the deciding sections of the recipe recorded in the manifest (the app reads them
back with ``evalq.recipe.stored`` and hands them over) and the same ``scoring.build_summary`` that
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

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from evalq.core.errors import InputError
from evalq.core.gates import VariantGate
from evalq.execute.pipeline_regate import regate_pipelines
from evalq.execute.search_decide import decide_search, with_search
from evalq.execute.summarize import build_summary, with_pipelines
from evalq.plan.load import CapacitySection
from evalq.plan.run import RunSections
from evalq.plan.search import SearchPlan
from evalq.results.folder import RunFolder, stored_form
from evalq.results.schema import RunManifest, RunSummary


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


class StoredParity(BaseModel):
    """What re-deciding reads of a variant's stored parity preflight (``manifest.json``
    ``variants.<name>.parity``): a checked preflight needs its figures."""

    model_config = ConfigDict(extra="allow")

    checked: bool = False
    passed: bool | None = None
    cosine_min: float | None = None
    cosine_mean: float | None = None
    min_cosine: float | None = None

    @model_validator(mode="after")
    def _figures_when_checked(self) -> StoredParity:
        if self.checked and None in (self.cosine_min, self.cosine_mean, self.min_cosine):
            raise ValueError("a checked parity preflight needs cosine_min, cosine_mean and "
                             "min_cosine")
        return self


def stored_variants(manifest: RunManifest, data: dict[str, Any], reference: str, file: Path
                    ) -> dict[str, dict[str, Any]]:
    """The manifest's per-variant entries, reference first, as ``build_summary`` reads
    them: from the typed manifest (``data``, the file as stored, gives each dataset's
    figures exactly as written), each parity record parsed; a manifest without the
    recipe's reference variant, or with a damaged parity record, is bad input naming
    ``file``."""
    if reference not in manifest.variants:
        raise InputError(message=f"the manifest has no variant '{reference}' (the recipe's "
                         "reference)", file=file, field="variants",
                         fix="rerun 'evalq run' to write a fresh folder")
    names = [reference, *(n for n in manifest.variants if n != reference)]
    variants = {}
    for name in names:
        info = {**manifest.variants[name].model_dump(),
                "datasets": data["variants"][name].get("datasets") or {}}
        if info["parity"] is not None:
            try:
                StoredParity.model_validate(info["parity"])
            except ValidationError as exc:
                problem = exc.errors()[0]["msg"]
                raise InputError(message=f"the parity record is damaged ({problem})",
                                 file=file, field=f"variants.{name}.parity",
                                 fix="rerun 'evalq run' to write a fresh folder") from None
        variants[name] = info
    return variants


def regate(results: str | Path, sections: RunSections,
           search: SearchPlan | None = None) -> Regated:
    """Re-decide ``results`` with ``sections``: the deciding parts of the recipe its
    manifest stores, which the app reads back (``evalq.recipe.stored``); ``search``, the
    stored recipe's search, is re-decided from its combinations' per-query values."""
    folder = RunFolder(results)
    file = folder.root / "manifest.json"
    manifest = folder.read_manifest_data()
    typed = folder.read_manifest()
    stored = folder.read_summary_data()
    variants = stored_variants(typed, manifest, sections.reference, file)
    summary, verdicts = build_summary(sections, variants, folder)
    pipeline_verdicts: dict[str, VariantGate] = {}
    changed: tuple[str, ...] = ()
    if sections.pipelines:  # pipeline gates, from pipelines/<name>/per_query
        piped = regate_pipelines(sections, folder, stored)
        pipeline_verdicts, changed = piped.verdicts, tuple(piped.changed)
        # as the run did: retriever-stage gates judge a candidate
        summary = with_pipelines(summary, piped.summary, piped.passed)
    if search is not None:  # the stored load: capacity prices are the run's
        capacity = (manifest.get("recipe") or {}).get("capacity")
        summary = with_search(summary, decide_search(
            search, sections, variants, folder,
            None if capacity is None else CapacitySection.model_validate(capacity)))
    return Regated(decided=summary, verdicts=verdicts, pipeline_verdicts=pipeline_verdicts,
                   recipe_name=sections.recipe, manifest=manifest, root=folder.root,
                   stored_passed=stored.get("passed"), changed=changed)
