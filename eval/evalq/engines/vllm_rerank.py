"""vLLM's offline pooling engine as a reranker: ``LLM.score(queries, documents)``.

With a sequence-classification checkpoint (one label) vLLM runs it as a cross-encoder;
with an embedding model it returns the cosine of the two embeddings (the bi-encoder
scorer). The same discipline as the embedding engine (``vllm_engine``): the activation
goes explicitly as ``PoolingParams(use_activation=...)`` (sigmoid or raw logits; vLLM has
no per-label softmax for scoring), truncation explicitly through the tokenizer
(``tokenization_kwargs``; vLLM refuses over-length pairs otherwise), and the engine core is
shut down explicitly in :meth:`close`, or the process aborts at exit.

Declares the ``vllm`` reranker backend (:data:`SPEC`, engine or managed server) and its
recipe options (:class:`RerankVllmOptions`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.errors import InputError, MissingExtraError
from evalq.core.values import QuantizationRecord
from evalq.core.weights import model_fingerprint
from evalq.engines.context import RerankerContext
from evalq.engines.devices import check_current_vllm
from evalq.engines.options import RerankVllmOptions
from evalq.engines.quantize import w8a8, w8a8_checkpoint
from evalq.engines.reranker import (
    Reranker,
    RerankSettings,
    bi_encoder_settings,
    rerank_settings,
)
from evalq.engines.spec import BackendSpec
from evalq.engines.vllm_engine import shutdown_llm
from evalq.engines.vllm_rerank_server import VllmRerankerIdentity, VllmServerReranker
from evalq.engines.vllm_server import ServerLaunch, engine_flags

BACKEND_NAME = "vllm-engine"




class VllmEngineReranker(VllmRerankerIdentity):
    backend = BACKEND_NAME

    def __init__(self, model_path: str | Path, *, settings: RerankSettings, kind: str,
                 dtype: str = "float32", quantization: str | None = None,
                 gpu_memory_utilization: float = 0.1, enforce_eager: bool | None = None,
                 extra_engine_args: dict[str, Any] | None = None,
                 record: QuantizationRecord | None = None) -> None:
        """``record``: what made ``model_path`` when it is a quantized checkpoint (W8A8
        int8), for the manifest; ``quantization`` is vLLM's own method name."""
        try:
            import vllm
            from vllm.platforms import current_platform
        except ImportError as exc:
            raise MissingExtraError("vllm", "cpu", "the vLLM backend") from exc

        if settings.activation == "softmax":
            raise InputError(message="vLLM's score API applies a sigmoid or nothing; it has "
                             "no softmax over labels", field="reranker.activation",
                             fix="use activation: sigmoid or none with backend vllm")
        check_current_vllm(quantization, dtype, model_path)
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

    def describe(self) -> dict[str, Any]:
        return {**self.identity(), "vllm_version": self.vllm_version,
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
        shutdown_llm(llm)


# -- the vllm reranker backend's declaration ------------------------------------------


def served_checkpoint(variant: Any, model_path: Path, cache_dir: Path | None,
                      ) -> tuple[Path, QuantizationRecord | None]:
    """What vLLM loads for a vllm variant: the model itself, or its W8A8 int8 checkpoint
    (made once by llm-compressor, cached by weight fingerprint, head kept in float; see
    ``quantize.w8a8``) with the record of what was done."""
    if variant.quantization is None:
        return model_path, None
    if variant.quantization["method"] != w8a8.NAME:  # the recipe check refuses this first
        raise InputError(message=f"backend vllm applies quantization method {w8a8.NAME} "
                         f"only, not '{variant.quantization['method']}'",
                         field="reranker.quantization.method",
                         fix=f"use method: {w8a8.NAME}, or vllm: {{quantization: ...}}")
    ckpt = w8a8_checkpoint(variant.quantization, model_path,
                           (cache_dir or Path(".evalq-cache")) / "checkpoints")
    return ckpt.path, ckpt.record


def _server_reranker(ctx: RerankerContext, served: Path,
                     record: QuantizationRecord | None) -> Reranker:
    spec, variant, model_path = ctx.spec, ctx.variant, ctx.model_path
    opts = variant.vllm
    assert opts is not None
    encoding = bi_encoder_settings(spec, model_path) if spec.kind == "bi-encoder" else None
    settings = rerank_settings(spec, model_path)
    if encoding is not None:  # the bi-encoder truncates each text at its own max length
        settings = replace(settings, max_length=encoding.max_length)
    launch = ServerLaunch(dtype=variant.dtype, quantization=opts.quantization,
                          gpu_memory_utilization=opts.gpu_memory_utilization,
                          enforce_eager=opts.enforce_eager,
                          startup_timeout_s=opts.startup_timeout_s,
                          extra_args=engine_flags(opts.engine_args))
    return VllmServerReranker(
        served, settings=settings, record=record, kind=spec.kind, encoding=encoding,
        log_dir=ctx.logs_dir or Path(".evalq-cache") / "logs", route=opts.route,
        launch=launch, max_batch=opts.max_batch)


def build(ctx: RerankerContext) -> Reranker:
    variant = ctx.variant
    served, record = served_checkpoint(variant, ctx.model_path, ctx.cache_dir)
    opts = variant.vllm
    if opts and opts.mode == "server":
        return _server_reranker(ctx, served, record)
    return VllmEngineReranker(
        served, settings=rerank_settings(ctx.spec, ctx.model_path), kind=ctx.spec.kind,
        dtype=variant.dtype, quantization=opts.quantization if opts else None,
        gpu_memory_utilization=opts.gpu_memory_utilization if opts else 0.1,
        enforce_eager=opts.enforce_eager if opts else None,
        extra_engine_args=opts.engine_args if opts else None, record=record)


SPEC = BackendSpec("vllm", "reranker", "engine", build, quantized_by="engine",
                   options_key="vllm", options_model=RerankVllmOptions,
                   model_kinds=("cross-encoder", "bi-encoder"),
                   self_batching=("cross-encoder", "bi-encoder"),
                   aliases=("vllm-engine", "vllm-server"))
