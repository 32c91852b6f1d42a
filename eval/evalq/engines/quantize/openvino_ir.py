"""OpenVINO IR of a checkpoint: converted from evalq's ONNX export, or a user's file.

``openvino.convert_model`` reads the ONNX export (``onnx_graph``) of the recipe's
checkpoint, so OpenVINO and ONNX Runtime run the same traced graph; ``save_model``
writes ``openvino_model.xml`` + ``.bin``, with float16 weights for a float16 variant
(``compress_to_fp16``). The IR is cached beside the export, keyed by its key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalq.core.errors import InputError
from evalq.engines.quantize.onnx_graph import (
    TOKEN_STATES,
    GraphHead,
    OnnxGraph,
    check_width,
    derived_graph,
    require,
    versions,
)

IR_FILE = "openvino_model.xml"
EXTRA = "openvino"
LIBRARIES = ("openvino",)


def convert_ir(parent: OnnxGraph, cache_dir: Path, *, fp16: bool) -> OnnxGraph:
    """The IR of an ONNX graph, float16 weights when ``fp16`` (made once per graph)."""
    require("openvino", EXTRA, "the openvino backend")

    def make(src: Path, out: Path) -> dict[str, Any]:
        import openvino as ov

        model = ov.convert_model(str(src))
        ov.save_model(model, str(out), compress_to_fp16=fp16)
        return {"converter": "openvino.convert_model (from the ONNX export)",
                "weights": "float16" if fp16 else "float32", "bits": 16 if fp16 else 32}

    return derived_graph(parent, cache_dir, "openvino-ir", {"fp16": fp16}, make,
                         file=IR_FILE, libraries=(*LIBRARIES, "onnx"))


def read_ir(core: Any, path: Path, width: int, *, field_name: str,
            head: GraphHead = TOKEN_STATES) -> Any:
    """The IR as an ``openvino.Model``, after refusing one that does not read (corrupt,
    truncated, a missing ``.bin``) or whose first output is not ``head``'s, ``width``
    wide (token states: the hidden size; logits: the head's labels)."""
    try:
        model = core.read_model(str(path))
    except Exception as exc:  # OpenVINO raises RuntimeError with the parser's message
        raise InputError(message=f"OpenVINO cannot read '{path}' (corrupt or truncated file, "
                         f"or its .bin missing?): {str(exc)[:300]}", file=path,
                         field=field_name, fix="convert the model again (delete the file to "
                         "let evalq convert it) or copy both .xml and .bin") from None
    names = {n for i in model.inputs for n in i.get_names()}
    if "input_ids" not in names:
        raise InputError(message=f"'{path}' takes inputs {sorted(names)}, not a tokenizer's "
                         "input_ids / attention_mask", file=path, field=field_name,
                         fix="convert the encoder with input_ids and attention_mask inputs")
    shape = model.outputs[0].get_partial_shape()
    last = shape[shape.rank.get_length() - 1] if shape.rank.is_static else None
    if not shape.rank.is_static or shape.rank.get_length() != head.rank:
        check_width(-1, width, path, field_name, head)
    elif last is not None and last.is_static:
        check_width(int(last.get_length()), width, path, field_name, head)
    return model


__all__ = ["EXTRA", "IR_FILE", "convert_ir", "read_ir", "versions"]
