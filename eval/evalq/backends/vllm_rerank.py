"""vLLM's offline pooling engine as a reranker: ``LLM.score(queries, documents)``.

With a sequence-classification checkpoint (one label) vLLM runs it as a cross-encoder;
with an embedding model it returns the cosine of the two embeddings (the bi-encoder
scorer). The same discipline as the embedding engine (``vllm_engine``): the activation
goes explicitly as ``PoolingParams(use_activation=...)`` (sigmoid or raw logits; vLLM has
no per-label softmax for scoring), truncation explicitly through the tokenizer
(``tokenization_kwargs``; vLLM refuses over-length pairs otherwise), and the engine core is
shut down explicitly in :meth:`close`, or the process aborts at exit.
"""

from __future__ import annotations

import gc
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evalq.backends.base import QuantizationRecord
from evalq.backends.reranker import RerankSettings, described_quantization, served_fingerprint
from evalq.errors import InputError, MissingExtraError

BACKEND_NAME = "vllm-engine"


class VllmEngineReranker:
    backend = BACKEND_NAME

    def __init__(self, model_path: str | Path, *, settings: RerankSettings, kind: str,
                 dtype: str = "float32", quantization: str | None = None,
                 gpu_memory_utilization: float = 0.1, enforce_eager: bool | None = None,
                 extra_engine_args: dict[str, Any] | None = None,
                 record: QuantizationRecord | None = None) -> None:
        """``record``: what made ``model_path`` when it is a quantized checkpoint (W8A8
        int8), for the manifest; ``quantization`` is vLLM's own method name."""
        try:
            from vllm.platforms import current_platform

            import vllm
        except ImportError as exc:
            raise MissingExtraError("vllm", "cpu", "the vLLM backend") from exc
        from evalq.backends.capability import check_current_device
        from evalq.weights import model_fingerprint

        if settings.activation == "softmax":
            raise InputError(message="vLLM's score API applies a sigmoid or nothing; it has "
                             "no softmax over labels", field="reranker.activation",
                             fix="use activation: sigmoid or none with backend vllm")
        check_current_device("vllm-engine", quantization, dtype)
        self.kind = kind
        self.model_path = Path(model_path)
        self.settings, self.dtype, self.quantization = settings, dtype, quantization
        self.record = record
        self.on_cpu = bool(current_platform.is_cpu())
        self.enforce_eager = self.on_cpu if enforce_eager is None else enforce_eager
        self.vllm_version = vllm.__version__
        self._model_fingerprint = model_fingerprint(self.model_path)
        self.forward_calls = 0
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        self.engine_args = {"model": str(self.model_path), "runner": "pooling", "dtype": dtype,
                            "quantization": quantization, "max_model_len": settings.max_length,
                            "gpu_memory_utilization": gpu_memory_utilization,
                            "enforce_eager": self.enforce_eager, **(extra_engine_args or {})}
        began = time.perf_counter()
        self._llm: Any = vllm.LLM(**self.engine_args)
        self.startup_s = time.perf_counter() - began
        self._tokenizer = self._llm.get_tokenizer()

    def fingerprint(self) -> str:
        return served_fingerprint(BACKEND_NAME, self.kind, self._model_fingerprint, self.dtype,
                                  self.quantization, self.settings)

    def describe(self) -> dict[str, Any]:
        return {"backend": BACKEND_NAME, "kind": self.kind, "model_path": str(self.model_path),
                "model_fingerprint": self._model_fingerprint, "dtype": self.dtype,
                "quantization": described_quantization(self.quantization, self.record),
                "vllm_version": self.vllm_version,
                "engine_args": {k: v for k, v in self.engine_args.items() if k != "model"},
                "request": {"use_activation": self._use_activation(),
                            "tokenization_kwargs": self._tokenization()},
                "startup_s": round(self.startup_s, 3), "settings": self.settings.as_dict(),
                "fingerprint": self.fingerprint()}

    def _use_activation(self) -> bool:
        return self.settings.activation == "sigmoid"

    def _tokenization(self) -> dict[str, Any]:
        return {"truncation": self.settings.truncation, "max_length": self.settings.max_length}

    def pair_lengths(self, queries: Sequence[str], documents: Sequence[str]) -> list[int]:
        enc = self._tokenizer(list(queries), list(documents), **self._tokenization())
        return [len(ids) for ids in enc["input_ids"]]

    def score(self, queries: Sequence[str], documents: Sequence[str]) -> np.ndarray:
        if self._llm is None:
            raise RuntimeError("VllmEngineReranker.score() called after close()")
        if not queries:
            return np.zeros(0, dtype=np.float64)
        from vllm.pooling_params import PoolingParams

        params = None if self.kind == "bi-encoder" else PoolingParams(
            use_activation=self._use_activation())
        kwargs: dict[str, Any] = {"use_tqdm": False, "pooling_params": params}
        if self.kind == "cross-encoder":
            kwargs["tokenization_kwargs"] = self._tokenization()
        else:  # each text alone: plain right truncation of each side
            kwargs["tokenization_kwargs"] = {"truncation": True,
                                             "max_length": self.settings.max_length}
        outputs = self._llm.score(list(queries), list(documents), **kwargs)
        self.forward_calls += 1
        return np.asarray([o.outputs.score for o in outputs], dtype=np.float64)

    def close(self) -> None:
        if self._llm is None:
            return
        llm, self._llm = self._llm, None
        try:
            llm.llm_engine.engine_core.shutdown()
        finally:
            del llm
            gc.collect()
