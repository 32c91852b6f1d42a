"""ONNX Runtime static int8 (QDQ): weights and activations int8, scales calibrated once.

Activation ranges are measured on corpus documents the run draws (seeded) from its own
corpora, never on the judged queries; the record keeps their ids, so anyone can see what
the scales were fitted to. With fixed scales, a text's quantized activations do not
depend on its batch neighbours, unlike dynamic int8. The ISA configurations are
:mod:`ort_dynamic`'s (optimum's presets, QDQ format for static).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from evalq.core.host import numerics_key
from evalq.engines.quantize import ort_dynamic
from evalq.engines.quantize.derive import (
    CalibrationCount,
    DeriveContext,
    Seed,
    calibration_texts,
    certified_graph,
    draw_digest,
    graph_method_load,
)
from evalq.engines.quantize.onnx_graph import GRAPH_FILE, OnnxGraph, derived_graph
from evalq.engines.quantize.ort_dynamic import WEIGHT_TYPES
from evalq.engines.quantize.ort_nodes import (
    STATIC_OPERATORS,
    check_skip,
    counted,
    nodes_to_quantize,
)

NAME = "ort-static-int8"
SUMMARY = "ONNX Runtime static int8, QDQ, calibrated on corpus texts"
BACKENDS = ("onnx",)
DEVICES = ("cpu",)

load = graph_method_load(NAME, BACKENDS)


class Params(ort_dynamic.Params):
    """The dynamic method's weight settings (ISA config, per-channel, which MatMuls), plus
    what static quantization adds: float-kept nodes and the calibration."""

    # MatMuls kept in float (regexes over node names). Default: the feed-forward
    # down-projection, whose input (after GELU) has outlier channels one per-tensor
    # activation scale cannot hold (with it kept float, MiniLM's cosine to fp32 is 0.9946
    # mean: record cpu_formats-20261202-1e2fb89)
    skip: tuple[str, ...] = (r"layer\.\d+/output/dense/",)
    calibration_texts: CalibrationCount = 128
    calibrate_method: Literal["minmax", "entropy", "percentile"] = "minmax"
    seed: Seed = 0
    # Texts per calibration batch. One: no padding tokens enter the ranges, and memory
    # stays low: the calibration session keeps every intermediate tensor of a batch, so
    # its peak grows with the batch (the cold quickstart peaked at 4,019 MiB with 16,
    # record rerun-20261201-84178cf, and 1,566 MiB with 1, rerun-20261202-1e2fb89)
    batch_texts: int = Field(default=1, ge=1)

    # Static mode always names MatMul nodes (weight ones, or all with ``nodes: all``).
    KNOWN_OPERATORS = STATIC_OPERATORS
    ALL_NODES_FIX = ""

    def matmul_nodes_only(self) -> bool:
        return True

    @field_validator("skip")
    @classmethod
    def _skip_patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return check_skip(value)


_CALIBRATION = {"minmax": "MinMax", "entropy": "Entropy", "percentile": "Percentile"}


def derive(parent: OnnxGraph, params: Params, ctx: DeriveContext) -> OnnxGraph:
    # The ranges come from running the float graph on this CPU, and the graph is meant
    # for its integer kernels: a calibrated graph belongs to the numerics class it was
    # made on (core.host), so a cache copied to another CPU calibrates again.
    def key_params(drawn: str) -> dict[str, Any]:
        return {**params.model_dump(mode="json"), "calibration_ids": drawn, **numerics_key()}

    certified = certified_graph(ctx, parent, NAME, params.calibration_texts, params.seed,
                                key_params, GRAPH_FILE)
    if certified is not None:
        return counted(certified, NAME)
    ids, texts = calibration_texts(ctx, params.calibration_texts, params.seed, NAME)
    drawn = draw_digest(ids)

    def make(src: Path, out: Path) -> dict[str, Any]:
        import onnx
        from onnxruntime.quantization import (
            CalibrationDataReader,
            CalibrationMethod,
            QuantFormat,
            QuantType,
            quantize_static,
        )

        names = [i.name for i in onnx.load(str(src), load_external_data=False).graph.input]

        class Reader(CalibrationDataReader):  # type: ignore[misc]
            """Tokenized corpus batches, as the encoder feeds them."""

            def __init__(self) -> None:
                self._batches: Iterator[dict[str, Any]] = _batches(ctx, texts, names,
                                                                   params.batch_texts)

            def get_next(self) -> dict[str, Any] | None:
                return next(self._batches, None)

        weight_type = WEIGHT_TYPES[params.config]
        nodes = nodes_to_quantize(src, weights_only=params.nodes == "weights",
                                  skip=params.skip)
        with ort_dynamic.quantizer_logging():
            quantize_static(
                str(src), str(out), Reader(), quant_format=QuantFormat.QDQ,
                op_types_to_quantize=list(params.operators),
                nodes_to_quantize=nodes,
                per_channel=params.per_channel, reduce_range=False,
                activation_type=QuantType.QUInt8, weight_type=getattr(QuantType, weight_type),
                calibrate_method=getattr(CalibrationMethod,
                                         _CALIBRATION[params.calibrate_method]))
        return {"bits": 8, "format": "QDQ", "activation_type": "QUInt8",
                "nodes_named": len(nodes),
                "weight_type": weight_type, "calibration": {
                    "source": ctx.front.calibration_source,
                    "count": len(ids), "ids": ids, "ids_sha256": drawn}}

    return counted(derived_graph(parent, ctx.cache_dir, NAME, key_params(drawn), make), NAME)


def _batches(ctx: DeriveContext, texts: list[str], names: list[str],
             size: int) -> Iterator[dict[str, Any]]:
    import numpy as np

    for start in range(0, len(texts), size):
        batch = ctx.front.batch(texts[start:start + size], tensors="np")
        yield {n: np.asarray(batch[n], dtype=np.int64) for n in names}
