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
from evalq.plan.types import Plan, VariantPlan


@dataclass(frozen=True)
class ServedGraph:
    """What fills ``{onnx_dir}`` (None: the launch serves no evalq graph) and its record."""

    onnx_dir: Path | None = None
    record: dict[str, Any] = field(default_factory=dict)


def served_graph(plan: Plan, variant: VariantPlan,
                 calibration: Callable[[int, int], list[tuple[str, str]]] | None = None,
                 ) -> ServedGraph:
    """The serving folder of the graph ``load.launch.<variant>.onnx_from`` names."""
    spec = variant.launch
    if spec is None or spec.onnx_from is None:
        return ServedGraph()
    source = next((v for v in plan.variants if v.name == spec.onnx_from), None)
    if source is None:  # `--only` left the source out of the plan
        raise InputError(message=f"variant '{variant.name}' serves the graph of "
                         f"'{spec.onnx_from}' (load.launch.{variant.name}.onnx_from), which "
                         "this run leaves out", field="--only",
                         fix=f"add it: --only {spec.onnx_from} --only {variant.name}")
    work = plan.work_dir
    ctx = BuildContext(source.model_folder(), source.encoding_settings(), work / "logs", "cpu",
                       work, calibration)
    graph, quantization = graph_for(source.options, ctx)
    folder, record = serving_folder(graph, ctx.model_path, variant.encoding_settings(),
                                    work / "checkpoints")
    record = {"onnx_from": source.name, "quantization": quantization.method, **record}
    return ServedGraph(folder, record)


__all__ = ["ServedGraph", "served_graph"]
