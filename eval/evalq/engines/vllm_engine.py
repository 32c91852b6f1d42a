"""vLLM's offline pooling engine (``vllm.LLM(runner="pooling")``) as an Encoder.

Every encoding setting is handed to vLLM explicitly instead of trusting what it reads from
the checkpoint, because engines disagree on defaults:

- pooling and normalization through ``PoolerConfig(seq_pooling_type=..., use_activation=...)``
  (``normalize`` was renamed ``use_activation`` in vLLM's pooling API) and again per request
  in ``PoolingParams(use_activation=...)``;
- truncation per request. vLLM *refuses* over-length texts unless told to truncate, while
  sentence-transformers truncates silently. Right truncation goes through the tokenizer
  (``tokenization_kwargs={"truncation": True, "max_length": L}``), which keeps the closing
  ``[SEP]`` exactly as sentence-transformers does. vLLM's own ``truncation_side="left"``
  slices the already-tokenized ids and so drops the leading ``[CLS]``; for left truncation
  we tokenize here with a left-truncating Hugging Face tokenizer (special tokens kept) and
  hand vLLM the token ids.

On CPU vLLM needs ``enforce_eager=True`` and reads ``gpu_memory_utilization`` as a share
of host RAM. An ``LLM`` left to the interpreter's cleanup aborts the process at exit, so
:meth:`VllmEngineEncoder.close` shuts the engine core down explicitly (and is idempotent).
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.errors import InputError, MissingExtraError
from evalq.core.host import numerics_key
from evalq.core.values import EncodingSettings
from evalq.core.weights import model_fingerprint
from evalq.engines.devices import check_current_vllm
from evalq.engines.lasttoken import eos_to_append, ids_with_eos

BACKEND_NAME = "vllm-engine"
VLLM_POOLING = {"mean": "MEAN", "cls": "CLS", "last": "LAST"}


def vllm_pooler_config_dict(settings: EncodingSettings) -> dict[str, Any]:
    """The pooler configuration that makes vLLM pool and normalize like ``settings``."""
    return {
        "seq_pooling_type": VLLM_POOLING[settings.pooling],
        "use_activation": settings.normalize,
    }


def on_cpu_host() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def checkpoint_quantized(model_path: str | Path) -> bool:
    """Whether a checkpoint declares its own quantization (``quantization_config`` in its
    ``config.json``: evalq's W8A8 compressed-tensors, AWQ, GPTQ), which vLLM applies
    without ``--quantization``."""
    try:
        config = json.loads((Path(model_path) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and bool(config.get("quantization_config"))


def cpu_numerics_dependent(on_cpu: bool, dtype: str, quantization: str | None,
                           model_path: str | Path) -> bool:
    """Whether vLLM's numbers belong to one numerics class (``core.host``): on a CPU host,
    16-bit dtypes and quantized kernels (vLLM's ``--quantization`` or a quantized
    checkpoint) are chosen by instruction set. fp32 keeps one key across classes, as the
    in-process fp32 model does (summation order only); a GPU is not a CPU class."""
    return on_cpu and (dtype != "float32" or bool(quantization)
                       or checkpoint_quantized(model_path))


def _model_fingerprint(model_path: Path) -> str:
    return model_fingerprint(model_path)


def _check_settings(settings: EncodingSettings, max_model_len: int) -> None:
    """What the engine cannot do, refused before it starts."""
    if settings.max_length > max_model_len:
        raise InputError(
            message=f"max_length {settings.max_length} exceeds the engine's "
            f"max_model_len {max_model_len}",
            field="max_model_len",
            fix=f"set max_model_len >= {settings.max_length} or lower max_length",
        )
    if settings.pooling not in VLLM_POOLING:
        raise InputError(
            message=f"vLLM has no '{settings.pooling}' sequence pooling",
            field="pooling",
            fix=f"use one of {', '.join(VLLM_POOLING)}",
        )


def shutdown_llm(llm: Any) -> None:
    """Shut a ``vllm.LLM``'s engine core and worker processes down, then drop it.

    An ``LLM`` left for the interpreter to clean up aborts the process at exit (exit code
    134) even after all work succeeded, so every owner of one (the encoder here, the
    reranker in ``engines.vllm_rerank``) closes it through this.
    """
    try:
        llm.llm_engine.engine_core.shutdown()
    finally:
        del llm
        gc.collect()


class VllmEngineEncoder:
    """Encoder over an in-process ``vllm.LLM`` pooling engine (worker processes included)."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        settings: EncodingSettings,
        dtype: str = "float32",
        quantization: str | None = None,
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.1,
        enforce_eager: bool | None = None,
        extra_engine_args: Mapping[str, Any] | None = None,
        dimensions: int | None = None,
    ) -> None:
        """Start the engine. ``max_model_len`` defaults to ``settings.max_length``;
        ``enforce_eager=None`` means True on CPU (CUDA graphs do not exist there).
        ``dimensions`` asks vLLM for Matryoshka-truncated vectors (vLLM truncates, then
        normalizes); a model vLLM does not take for Matryoshka is refused at start-up.
        """
        try:
            import vllm
            from vllm.config import PoolerConfig
        except ImportError as exc:
            raise MissingExtraError("vllm", "cpu", "the vLLM backend") from exc

        check_current_vllm(quantization, dtype, model_path)  # before anything loads
        self.model_path = Path(model_path)
        self.settings = settings
        self.dtype = dtype
        self.quantization = quantization
        self.max_model_len = max_model_len or settings.max_length
        _check_settings(settings, self.max_model_len)
        self.on_cpu = on_cpu_host()
        self.enforce_eager = self.on_cpu if enforce_eager is None else enforce_eager
        self.gpu_memory_utilization = gpu_memory_utilization
        self.extra_engine_args = dict(extra_engine_args or {})
        self.dimensions = dimensions
        self.vllm_version = vllm.__version__
        self._model_fingerprint = _model_fingerprint(self.model_path)
        self._left_tokenizer: Any = None
        self._closed = False

        engine_args: dict[str, Any] = {
            "model": str(self.model_path),
            "runner": "pooling",
            "dtype": dtype,
            "quantization": quantization,
            "max_model_len": self.max_model_len,
            "gpu_memory_utilization": gpu_memory_utilization,
            "enforce_eager": self.enforce_eager,
            "pooler_config": PoolerConfig(**vllm_pooler_config_dict(settings)),
            **self.extra_engine_args,
        }
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        started = time.perf_counter()
        self._llm: Any = vllm.LLM(**engine_args)
        self.startup_s = time.perf_counter() - started
        self._tokenizer = self._llm.get_tokenizer()
        self._eos_id = eos_to_append(self._tokenizer, settings)
        if dimensions is not None:
            try:
                self.check_dimensions(dimensions)
            except InputError:
                self.close()
                raise
        if settings.truncation_side == "left":
            from transformers import AutoTokenizer

            self._left_tokenizer = AutoTokenizer.from_pretrained(
                str(self.model_path), truncation_side="left"
            )

    # -- Encoder protocol --------------------------------------------------------------------

    def fingerprint(self) -> str:
        """Cache key: backend, weights, dtype, quantization, settings, and on a CPU host
        below fp32 the numerics class (not the vLLM version: a new engine with the same
        settings should agree; the parity preflight checks it)."""
        blob = json.dumps(
            {
                "backend": BACKEND_NAME,
                "model": self._model_fingerprint,
                "dtype": self.dtype,
                "quantization": self.quantization,
                "settings": self.settings.fingerprint(),
                **({"dimensions": self.dimensions} if self.dimensions is not None else {}),
                # On a CPU host, 16-bit and quantized kernels are chosen by instruction
                # set (core.host): such vectors belong to one numerics class.
                **({"numerics": numerics_key()} if cpu_numerics_dependent(
                    self.on_cpu, self.dtype, self.quantization, self.model_path) else {}),
            },
            sort_keys=True,
        ).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def describe(self) -> dict[str, Any]:
        return {
            "backend": BACKEND_NAME,
            "model_path": str(self.model_path),
            "model_fingerprint": self._model_fingerprint,
            "dtype": self.dtype,
            "quantization": self.quantization,
            "vllm_version": self.vllm_version,
            "device": "cpu" if self.on_cpu else "cuda",
            "max_model_len": self.max_model_len,
            "enforce_eager": self.enforce_eager,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "pooler_config": vllm_pooler_config_dict(self.settings),
            "truncation": self._truncation_description(),
            "extra_engine_args": self.extra_engine_args,
            "dimensions": self.dimensions,
            "startup_s": round(self.startup_s, 3),
            "settings": self.settings.as_dict(),
        }

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        if self._eos_id is not None:
            return [len(ids) for ids in self._token_ids(texts)]
        tok = self._left_tokenizer or self._tokenizer
        enc = tok(
            list(texts),
            truncation=True,
            max_length=self.settings.max_length,
            add_special_tokens=True,
        )
        return [len(ids) for ids in enc["input_ids"]]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self._closed:
            raise RuntimeError("VllmEngineEncoder.embed() called after close()")
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        from vllm.pooling_params import PoolingParams

        params = PoolingParams(use_activation=self.settings.normalize,
                               dimensions=self.dimensions)
        if self._left_tokenizer is not None or self._eos_id is not None:
            from vllm.inputs import TokensPrompt

            ids = self._token_ids(texts)
            prompts: list[Any] = [TokensPrompt(prompt_token_ids=list(x)) for x in ids]
            outputs = self._llm.embed(prompts, pooling_params=params, use_tqdm=False)
        else:
            outputs = self._llm.embed(
                list(texts),
                pooling_params=params,
                tokenization_kwargs={"truncation": True, "max_length": self.settings.max_length},
                use_tqdm=False,
            )
        return np.asarray([o.outputs.embedding for o in outputs], dtype=np.float32)

    def close(self) -> None:
        """Shut the engine core (and its worker processes) down; idempotent."""
        if self._closed:
            return
        self._closed = True
        llm, self._llm = self._llm, None
        shutdown_llm(llm)

    def __enter__(self) -> VllmEngineEncoder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _token_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Ids evalq tokenizes itself: left truncation (special tokens kept) or the EOS
        appended (``append_eos``), which vLLM's own text path cannot do."""
        tok = self._left_tokenizer or self._tokenizer
        if self._eos_id is not None:
            return ids_with_eos(tok, texts, self.settings.max_length, self._eos_id)
        return [list(x) for x in tok(list(texts), truncation=True,
                                     max_length=self.settings.max_length,
                                     add_special_tokens=True)["input_ids"]]

    def check_dimensions(self, dimensions: int) -> None:
        """vLLM checks ``dimensions`` per request; the constructor asks once at start-up so
        a refusal is a clear exit 2 before anything encodes, naming vLLM's own answer."""
        from vllm.exceptions import VLLMValidationError
        from vllm.pooling_params import PoolingParams

        try:
            self._llm.embed(["dimensions probe"], use_tqdm=False,
                            pooling_params=PoolingParams(dimensions=dimensions))
        except (ValueError, TypeError, VLLMValidationError) as exc:
            raise InputError(
                message=f"vLLM refused dimensions={dimensions} for this model: {exc}",
                field="vectors.dims",
                fix="remove vectors.dims (evalq then truncates client-side, if the model was "
                    "trained for it), or declare the model Matryoshka to vLLM with "
                    "vllm: {engine_args: {hf_overrides: {is_matryoshka: true}}}") from exc

    # -- internals ---------------------------------------------------------------------------

    def _truncation_description(self) -> dict[str, Any]:
        if self._left_tokenizer is not None:
            how = "left-truncating HF tokenizer in evalq, token ids sent to vLLM"
        else:
            how = "vLLM tokenization_kwargs truncation=True"
        return {
            "max_length": self.settings.max_length,
            "side": self.settings.truncation_side,
            "how": how,
        }
