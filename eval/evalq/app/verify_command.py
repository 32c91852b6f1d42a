"""``evalq certify RESULTS`` and ``evalq verify CERTIFICATE``: what they print and return
(the work is ``evalq.execute.certify``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalq.execute.certify import PlanFor, certify, read_certificate, verify
from evalq.plan.types import Plan
from evalq.plan.variant import SearchedVariant
from evalq.recipe.plan import build_plan
from evalq.recipe.schema import Recipe
from evalq.results.folder import RunFolder


def stored_plans(stored: Any, recipe_file: Path) -> tuple[dict[str, SearchedVariant], PlanFor]:
    """The variants of a recipe a results folder or a certificate stores, and a planner
    for one of them at a time (without the cache), which certify and verify take."""
    recipe = Recipe.model_validate(stored)

    def plan_for(name: str) -> Plan:
        return build_plan(recipe, recipe_file, use_cache=False, only=[name])

    return {v.name: v for v in recipe.variants}, plan_for


def certify_command(results: Path, *, probe: int = 32) -> int:
    manifest = RunFolder(results).read_manifest_data()
    variants, plan_for = stored_plans(manifest["recipe"],
                                      Path(str(manifest.get("recipe_file") or "")))
    written, notes = certify(results, variants, plan_for, probe=probe)
    for note in notes:
        print(f"note: {note}")
    for path in written:
        print(f"certificate written to {path}")
    if not written:
        print("no certificate: no candidate passed every gate with an in-process engine")
    return 0


def verify_command(certificate: Path, *, url: str | None = None,
                   model: str | None = None) -> int:
    """0 when this machine's engine (or the endpoint at ``url``) reproduces the
    certificate, 1 (naming the causes it can tell) when it does not."""
    cert = read_certificate(certificate)
    _, plan_for = stored_plans(cert["recipe"], Path(cert["recipe_file"]))
    found = verify(cert, plan_for(cert["variant"]), url=url, model=model)
    print(f"{found.variant}: min cosine {found.min_cosine:.7f} against the certified "
          f"vectors, tolerance 1 - cosine <= {found.tolerance:.2e}")
    for note in found.notes:
        print(f"note: {note} (the vectors still match)")
    if found.matched:
        print("MATCH: this deployment reproduces the certified candidate")
        return 0
    print("MISMATCH: this deployment does not reproduce the certified candidate")
    for cause in found.causes:
        print(f"  cause: {cause}")
    return 1
