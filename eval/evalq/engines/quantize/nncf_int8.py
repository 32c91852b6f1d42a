"""OpenVINO int8 by NNCF post-training quantization, calibrated on corpus texts.

``nncf.quantize`` inserts FakeQuantize nodes with ranges measured on an
``nncf.Dataset`` of tokenized corpus documents (drawn by the run, never its judged
queries; the record keeps their ids), with ``ModelType.TRANSFORMER`` so the attention
parts it knows to be sensitive stay in float. The CPU plugin then runs those parts of
the graph in int8.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evalq.core.host import numerics_key
from evalq.engines.quantize.derive import (
    CalibrationCount,
    DeriveContext,
    Seed,
    calibration_texts,
    certified_graph,
    draw_digest,
    graph_method_load,
)
from evalq.engines.quantize.onnx_graph import OnnxGraph, derived_graph
from evalq.engines.quantize.openvino_ir import IR_FILE

NAME = "nncf-int8"
SUMMARY = "OpenVINO int8, NNCF post-training quantization calibrated on corpus texts"
BACKENDS = ("openvino",)
DEVICES = ("cpu",)

load = graph_method_load(NAME, BACKENDS)


class Params(BaseModel):
    model_config = ConfigDict(extra="forbid")
    preset: Literal["performance", "mixed"] = "mixed"
    calibration_texts: CalibrationCount = 128
    seed: Seed = 0
    batch_texts: int = Field(default=1, ge=1)  # texts per calibration sample
    fast_bias_correction: bool = True


def derive(parent: OnnxGraph, params: Params, ctx: DeriveContext) -> OnnxGraph:
    # The ranges come from running the float graph on this CPU, and the graph is meant
    # for its integer kernels: a calibrated graph belongs to the numerics class it was
    # made on (core.host), so a cache copied to another CPU calibrates again.
    def key_params(drawn: str) -> dict[str, Any]:
        return {**params.model_dump(mode="json"), "calibration_ids": drawn, **numerics_key()}

    certified = certified_graph(ctx, parent, NAME, params.calibration_texts, params.seed,
                                key_params, IR_FILE)
    if certified is not None:
        return certified
    ids, texts = calibration_texts(ctx, params.calibration_texts, params.seed, NAME)
    drawn = draw_digest(ids)

    def make(src: Path, out: Path) -> dict[str, Any]:
        import nncf
        import numpy as np
        import openvino as ov

        model = ov.Core().read_model(str(src))
        names = [n for n in ("input_ids", "attention_mask", "token_type_ids")
                 if any(n in i.get_names() for i in model.inputs)]
        samples = []
        for start in range(0, len(texts), params.batch_texts):
            batch = ctx.front.batch(texts[start:start + params.batch_texts], tensors="np")
            samples.append({n: np.asarray(batch[n], dtype=np.int64) for n in names})
        quantized = nncf.quantize(
            model, nncf.Dataset(samples), model_type=nncf.ModelType.TRANSFORMER,
            preset=getattr(nncf.QuantizationPreset, params.preset.upper()),
            subset_size=len(samples), fast_bias_correction=params.fast_bias_correction)
        ov.save_model(quantized, str(out), compress_to_fp16=False)
        return {"bits": 8, "format": "OpenVINO IR with FakeQuantize (NNCF PTQ)",
                "model_type": "TRANSFORMER", "calibration": {
                    "source": ctx.front.calibration_source,
                    "count": len(ids), "ids": ids, "ids_sha256": drawn}}

    return derived_graph(parent, ctx.cache_dir, NAME, key_params(drawn), make, file=IR_FILE,
                         libraries=("openvino", "nncf"))
