"""What every graph model (ONNX Runtime or OpenVINO; encoder or cross-encoder) shares.

A graph model runs an exported graph of a checkpoint. Its cache key and its manifest
description have one layout whatever the model does with the graph's output: who runs
it (``identity``: the backend, and a reranker's kind), the graph's content key, what
quantization made it, the settings, plus the runtime's own parts (version, session
options). ``GraphEncoder`` and ``GraphReranker`` add their text side; ``OrtSession`` and
``OpenVinoModel`` add their runtime.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.errors import InputError
from evalq.core.host import numerics_key
from evalq.core.values import QuantizationRecord, vector_problem
from evalq.engines.quantize.onnx_graph import OnnxGraph


class GraphModel:
    """The graph, its record and settings; the cache key and the description built from
    them. A subclass sets ``identity`` and ``_inputs``, and implements :meth:`_run` and
    :meth:`_ready` (its runtime mixin does)."""

    def __init__(self, model_path: str | Path, graph: OnnxGraph, *, settings: Any,
                 record: QuantizationRecord, field_name: str) -> None:
        self.model_path = Path(model_path)
        self.settings = settings
        self.graph = graph
        self.record = record
        self.forward_calls = 0
        self._field = field_name
        self._inputs: list[str] = []
        self._width_checked = False

    def _output(self, feed: dict[str, Any]) -> np.ndarray:
        """The graph's first output for one batch as float32, refused (exit 2, naming the
        graph file) when it is no floating-point tensor: an int64 output was cast
        silently and measured as garbage."""
        raw = np.asarray(self._run(feed))
        if not np.issubdtype(raw.dtype, np.floating):
            raise InputError(
                message=f"'{self.graph.path}': its first output is {raw.dtype}, not "
                "floating-point (token states or logits)", file=self.graph.path,
                field=self._field, fix="export the model's float outputs (float32) as the "
                "graph's first output")
        return raw.astype(np.float32, copy=False)

    def _check_user_output(self, values: np.ndarray, what: str) -> None:
        """A user's graph whose outputs come out NaN, infinite or all zero is named as
        the cause (``onnx.file`` / ``openvino.file``), not the checkpoint folder."""
        if self.graph.info.get("exporter") != "user file":
            return
        problem = vector_problem(values if values.ndim == 2 else values.reshape(-1, 1))
        if problem is not None:
            raise InputError(
                message=f"'{self.graph.path}' returned unusable {what}: {problem}",
                file=self.graph.path, field=self._field,
                fix="check the graph (a float16 export can overflow to inf or NaN): export "
                "the checkpoint in float32, or drop 'file' to let evalq export it")

    def identity(self) -> dict[str, Any]:
        """Who runs the graph: ``{"backend": ...}`` (and a reranker's ``kind``)."""
        raise NotImplementedError

    def _run(self, feed: dict[str, Any]) -> Any:
        """The graph's first output for one batch."""
        raise NotImplementedError

    def _ready(self) -> bool:
        raise NotImplementedError

    def isa_dependent(self) -> bool:
        """Whether the numbers depend on the CPU's instruction set beyond fp32 rounding:
        an int8 graph runs integer kernels chosen by ISA (VNNI or not, AVX-512 or AVX2,
        AMX), which round differently, so its vectors belong to one numerics class. An
        fp32 graph keeps its key: its kernels differ only in summation order (last
        digits, within every tolerance evalq applies), and a cache shared between
        machines stays useful."""
        return self.record.bits is not None and self.record.bits <= 8

    def _key(self, **extra: Any) -> str:
        """Cache key: identity, graph content, quantization, settings, plus the runtime's
        own parts (``extra``: version, session options); for an ISA-dependent model, the
        numerics class (``core.host``), so a cache copied to another CPU recomputes."""
        numerics = {"numerics": numerics_key()} if self.isa_dependent() else {}
        blob = json.dumps({
            **self.identity(), "graph": self.graph.key,
            "quantization": {"method": self.record.method, "params": self.record.params},
            "settings": self.settings.fingerprint(), **extra, **numerics,
        }, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def fingerprint(self) -> str:
        return self._key()

    def _description(self, **extra: Any) -> dict[str, Any]:
        return {**self.identity(), "model_path": str(self.model_path),
                "graph": str(self.graph.path), "graph_key": self.graph.key,
                "graph_info": self.graph.info, "device": "cpu", **extra,
                "quantization": self.record.as_dict(), "settings": self.settings.as_dict(),
                "fingerprint": self.fingerprint()}


__all__ = ["GraphModel"]
