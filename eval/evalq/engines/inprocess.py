"""In-process encoder: a transformers ``AutoModel`` plus pooling, on CPU or CUDA.

This is the reference engine: its float32 output equals sentence-transformers'
``encode`` of the same model (same tokenizer call, same pooling arithmetic, same
normalization), so a quantized candidate is judged against what users already trust.

Prefixes are **not** applied here: ``settings.query_prefix`` / ``document_prefix`` are
recorded in the settings (and therefore in the fingerprint), but ``embed`` encodes
exactly the texts it is given. ``encode.py`` prepends the prefix, because only it knows
whether a text is a query or a document; applying it twice would be a silent bug.

Batching, ordering and caching also live in ``encode.py``: ``embed`` pads a batch to
its longest member, so callers should pass texts of similar length (sorted by
:meth:`InProcessEncoder.token_lengths`).
"""

from __future__ import annotations

import gc
import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.host import numerics_key
from evalq.core.protocols import Encoder
from evalq.core.values import EncodingSettings, QuantizationRecord
from evalq.core.weights import model_fingerprint
from evalq.engines.context import BuildContext
from evalq.engines.options import EncoderVariant
from evalq.engines.quantize import load_model
from evalq.engines.spec import NEAR_INVARIANT_TOLERANCE, BackendSpec, BatchDependence
from evalq.engines.textfront import TokenizerFront, pooled_vectors

BACKEND_NAME = "inprocess"


class InProcessEncoder:
    """Encoder protocol on transformers; see the module docstring for what it does not do.

    ``threads`` sets PyTorch's intra-op thread count (process-wide, as PyTorch has one
    pool); ``None`` keeps PyTorch's default of one thread per physical core (2 threads
    beat 1 on the 2-core CI machine).
    """

    def __init__(self, model_path: str | Path, *, settings: EncodingSettings,
                 dtype: str = "float32", quantization: Mapping[str, Any] | None = None,
                 device: str = "cpu", threads: int | None = None) -> None:
        import torch

        if threads is not None:
            torch.set_num_threads(threads)
        self.model_path = Path(model_path)
        self.settings = settings
        self.dtype = dtype
        self.device = device
        self.forward_calls = 0
        self._model_fingerprint = model_fingerprint(self.model_path)
        model, record = load_model(self.model_path, dtype=dtype, quantization=quantization,
                                   device=device)
        self._model: Any = model
        self.record: QuantizationRecord = record
        self._front = TokenizerFront(self.model_path, settings)
        self._tokenizer = self._front.tokenizer
        self._input_device = input_device(model, device)
        self.dim = int(model.config.hidden_size)

    # ------------------------------------------------------------------ protocol

    def fingerprint(self) -> str:
        """Cache key: backend, model weights, dtype, quantization parameters, settings."""
        blob = json.dumps({
            "backend": BACKEND_NAME,
            "model": self._model_fingerprint,
            "dtype": self.dtype,
            "quantization": {"method": self.record.method, "params": self.record.params},
            "settings": self.settings.fingerprint(),
            # Kernels differ by device and library version: vectors from another torch,
            # transformers or bitsandbytes are not these vectors.
            "device": self.device,
            "versions": _library_versions(),
            # int8 (and reduced-precision) CPU kernels are chosen by instruction set: such
            # vectors belong to one numerics class. fp32 keeps its key (see GraphModel).
            **({"numerics": numerics_key()} if self._isa_dependent() else {}),
        }, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def _isa_dependent(self) -> bool:
        return cpu_isa_dependent(self.device, self.record.method, self.dtype)

    def describe(self) -> dict[str, Any]:
        import torch
        import transformers

        info: dict[str, Any] = {
            "backend": BACKEND_NAME,
            "model_path": str(self.model_path),
            "model_fingerprint": self._model_fingerprint,
            "dtype": self.dtype,
            "device": self.device,
            "threads": torch.get_num_threads(),
            "attn_implementation": getattr(self._model.config, "_attn_implementation", None),
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
            "quantization": self.record.as_dict(),
            "settings": self.settings.as_dict(),
            "fingerprint": self.fingerprint(),
        }
        if self.record.method == "bitsandbytes":
            import bitsandbytes

            info["versions"]["bitsandbytes"] = bitsandbytes.__version__
        return info

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        """Token counts with special tokens, after truncation to ``settings.max_length``."""
        return self._front.token_lengths(texts)

    def tokenize(self, texts: Sequence[str]) -> Any:
        """The padded batch ``embed`` runs (``textfront.TokenizerFront.batch``)."""
        return self._front.batch(texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 ``(len(texts), dim)``; one forward pass over the batch padded to its longest."""
        import torch

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        if self._model is None:
            raise RuntimeError("InProcessEncoder.embed called after close()")
        batch = self.tokenize(texts)
        inputs = {k: v.to(self._input_device) for k, v in batch.items()}
        with torch.inference_mode():
            hidden = self._model(**inputs).last_hidden_state
            self.forward_calls += 1
            return pooled_vectors(hidden, inputs["attention_mask"], self.settings)

    def close(self) -> None:
        if self._model is None:
            return
        self._model = None
        gc.collect()
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:  # pragma: no cover - torch was importable at construction
            pass


def cpu_isa_dependent(device: str, method: str, dtype: str) -> bool:
    """Whether a torch model's numbers belong to one numerics class: int8 and
    reduced-precision kernels on the CPU. Plain fp32 is loaded as the ``dtype`` method at
    float32, which is fp32 arithmetic (summation order only): its key stays shared."""
    return device == "cpu" and (method not in ("none", "dtype") or dtype != "float32")


def _library_versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {}
    for name in ("torch", "transformers", "bitsandbytes"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def input_device(model: Any, device: str) -> Any:
    """Where the input ids must go: the embedding layer's device (bnb models use device_map)."""
    embeddings = model.get_input_embeddings()
    return embeddings.weight.device if embeddings is not None else device


# -- the backend's declaration ------------------------------------------------------
# Batch dependence of each quantization method this backend applies; every one is
# checked against the real encoder by tests/encode/test_composition.py.

PADDED_FLOAT = BatchDependence(
    "near-invariant",
    "masked attention and per-text pooling: neighbours only change padding, so only the "
    "rounding of differently shaped matmuls differs", NEAR_INVARIANT_TOLERANCE)
PADDED_HALF = BatchDependence(
    "near-invariant",
    "16-bit weights, same masked arithmetic as float32: neighbours change padding only", 1e-2)
LLM_INT8 = BatchDependence(
    "dependent",
    "LLM.int8() keeps in fp16 every activation column where any token of the batch "
    "exceeds the outlier threshold: the batch decides which columns are int8", None)
WEIGHT_ONLY_4BIT = BatchDependence(
    "near-invariant",
    "4-bit weights dequantized per block, activations left in the compute dtype: nothing "
    "is computed across the texts of a batch", NEAR_INVARIANT_TOLERANCE)
TORCH_DYNAMIC = BatchDependence(
    "dependent",
    "torch dynamic int8 scales activations per tensor: one scale per batch, set by the "
    "batch's largest activation", None)


def batch_dependence(variant: EncoderVariant) -> BatchDependence:
    quant = variant.quantization or {}
    method = quant.get("method")
    if method is None or method == "dtype":
        dtype = quant.get("dtype", variant.dtype) if method == "dtype" else variant.dtype
        return PADDED_FLOAT if dtype == "float32" else PADDED_HALF
    if method == "bitsandbytes":
        return LLM_INT8 if quant.get("bits") == 8 else WEIGHT_ONLY_4BIT
    if method == "torch-dynamic-int8":
        return TORCH_DYNAMIC
    return BatchDependence("unverified", f"no declaration for backend {BACKEND_NAME!r} "
                           f"with quantization {method!r}", None)


def build(variant: EncoderVariant, ctx: BuildContext) -> Encoder:
    return InProcessEncoder(ctx.model_path, settings=ctx.settings, dtype=variant.dtype,
                            quantization=variant.quantization, device=ctx.device)


SPEC = BackendSpec(BACKEND_NAME, "embedding", "in-process", build, quantized_by="evalq",
                   batch_dependence=batch_dependence, ray=True,
                   cache_key="chunks keyed by weights fingerprint, dtype, quantization, "
                   "device, torch/transformers/bitsandbytes versions, numerics class (int8 and "
                   "16-bit on CPU), settings, texts")


__all__ = ["BACKEND_NAME", "LLM_INT8", "PADDED_FLOAT", "PADDED_HALF", "SPEC", "TORCH_DYNAMIC",
           "WEIGHT_ONLY_4BIT", "InProcessEncoder", "batch_dependence", "build", "input_device"]
