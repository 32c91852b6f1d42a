"""The probe's targets for a recipe, resolved the way the plan resolves them (model folder,
model defaults + recipe overrides), for tests that probe without planning a run."""

from __future__ import annotations

from pathlib import Path

from evalq.engines.http_probe import ProbeTarget
from evalq.engines.modelinfo import resolve_model_path, resolve_settings
from evalq.plan.load import launch_spec
from evalq.recipe.schema import Recipe


def probe_targets(recipe: Recipe) -> list[ProbeTarget]:
    targets = []
    for i, variant in enumerate(recipe.variants):
        model_path = resolve_model_path(variant.model or recipe.model.path)
        merged = recipe.encoding.merged(variant.encoding)
        settings = resolve_settings(model_path, merged.model_dump(exclude_none=True))
        targets.append(ProbeTarget(
            variant, "reference" if i == 0 else f"candidates.{i - 1}", model_path, settings,
            Path(recipe.cache_dir),
            launched=launch_spec(recipe.load, variant.name) is not None))
    return targets
