"""``{onnx_dir}`` for a launched server: the graph of the ``onnx`` variant it serves.

``evalq run``, ``evalq parity`` and ``evalq load`` each start a recipe's ``load.launch``
servers; a launch whose ``onnx_from`` names an ``onnx`` variant gets that variant's graph
(exported, or derived by its quantization method, from evalq's cache: the same file the
in-process variant ran) in a folder the server can load (:mod:`evalq.engines.onnx_serve`).
Building it here, from the plan, keeps the three commands on one graph.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalq.core.errors import InputError
from evalq.engines.context import BuildContext
from evalq.engines.onnx_backend import graph_for
from evalq.engines.onnx_serve import serving_folder
from evalq.recipe.plan import VariantPlan
from evalq.recipe.schema import Recipe, Variant


@dataclass(frozen=True)
class ServedGraph:
    """What fills ``{onnx_dir}`` (None: the launch serves no evalq graph) and its record."""

    onnx_dir: Path | None = None
    record: dict[str, Any] = field(default_factory=dict)


def served_graph(recipe: Recipe, variant: Variant, plan_of: Callable[[str], VariantPlan],
                 calibration: Callable[[int, int], list[tuple[str, str]]] | None = None,
                 ) -> ServedGraph:
    """The serving folder of the graph ``load.launch.<variant>.onnx_from`` names."""
    section = recipe.load
    spec = section.launch.get(variant.name) if section is not None else None
    if spec is None or spec.onnx_from is None:
        return ServedGraph()
    source = next(v for v in recipe.variants if v.name == spec.onnx_from)
    try:
        source_plan = plan_of(source.name)
    except (KeyError, StopIteration):  # `--only` left the source out of the plan
        raise InputError(message=f"variant '{variant.name}' serves the graph of "
                         f"'{source.name}' (load.launch.{variant.name}.onnx_from), which "
                         "this run leaves out", field="--only",
                         fix=f"add it: --only {source.name} --only {variant.name}") from None
    cache_dir = Path(recipe.cache_dir)
    ctx = BuildContext(source_plan.model_folder(), source_plan.encoding_settings(),
                       cache_dir / "logs", "cpu", cache_dir, calibration)
    graph, quantization = graph_for(source, ctx)
    served_settings = plan_of(variant.name).encoding_settings()
    folder, record = serving_folder(graph, ctx.model_path, served_settings,
                                    cache_dir / "checkpoints")
    record = {"onnx_from": source.name, "quantization": quantization.method, **record}
    return ServedGraph(folder, record)


__all__ = ["ServedGraph", "served_graph"]
