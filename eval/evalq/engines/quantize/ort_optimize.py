"""ONNX Runtime's offline graph optimization, at the levels users know from optimum.

- O1: ONNX Runtime's basic graph optimizations (constant folding, redundant nodes);
- O2: O1, extended optimizations and the transformer fusions of
  ``onnxruntime.transformers`` (Attention, SkipLayerNormalization, BiasGelu, ...);
- O3: O2 with GELU replaced by its tanh approximation (FastGelu): vectors change;
- O4: O3 in float16. ONNX Runtime's CPU execution provider has no float16 kernels for
  most of these operators (it falls back, slower than float32), and backend ``onnx``
  runs on the CPU, so O4 is refused when the recipe is read (exit 2).

The graph stays float32 (O1–O3); its record says which fusions were made.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator

from evalq.engines.quantize.derive import DeriveContext, graph_method_load
from evalq.engines.quantize.onnx_graph import OnnxGraph, derived_graph

NAME = "ort-optimize"
SUMMARY = "ONNX Runtime offline graph optimization, levels O1-O3 (O4, fp16, needs a GPU)"
BACKENDS = ("onnx",)
DEVICES = ("cpu",)

load = graph_method_load(NAME, BACKENDS)


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    level: Literal["O1", "O2", "O3", "O4"] = "O2"

    @field_validator("level")
    @classmethod
    def _cpu_level(cls, value: str) -> str:
        if value == "O4":
            raise ValueError("level O4 converts the graph to float16, which ONNX Runtime's "
                             "CPU execution provider does not run natively; backend onnx "
                             "runs on the CPU: use O1, O2 or O3")
        return value


def derive(parent: OnnxGraph, params: Params, ctx: DeriveContext) -> OnnxGraph:
    def make(src: Path, out: Path) -> dict[str, Any]:
        from onnxruntime.transformers.fusion_options import FusionOptions
        from onnxruntime.transformers.optimizer import optimize_model

        if params.level == "O1":
            model = optimize_model(str(src), model_type="bert", opt_level=1,
                                   only_onnxruntime=True)
        else:
            options = FusionOptions("bert")
            options.enable_gelu_approximation = params.level == "O3"
            config = json.loads((ctx.model_path / "config.json").read_text())
            model = optimize_model(str(src), model_type="bert",
                                   num_heads=int(config.get("num_attention_heads", 0)),
                                   hidden_size=int(config.get("hidden_size", 0)),
                                   optimization_options=options, opt_level=1)
        model.save_model_to_file(str(out))
        fused = {k: int(v) for k, v in (model.get_fused_operator_statistics() or {}).items()
                 if v}
        return {"bits": 32, "level": params.level, "fused_operators": fused}

    return derived_graph(parent, ctx.cache_dir, NAME, params.model_dump(mode="json"), make)
