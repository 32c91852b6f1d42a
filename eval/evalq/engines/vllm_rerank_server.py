"""vLLM's OpenAI-compatible server as a reranker: evalq starts it, scores through
``/score`` (or ``/rerank``, ``/v1/rerank``, ``/v2/rerank``), and stops it.

The process is the embedding backend's :class:`~evalq.engines.vllm_server.VllmServer`
(own process group, parent-death signal, health wait, stop on close/exit/SIGTERM); the
requests are :class:`~evalq.engines.rerank_http.HttpReranker`'s (answers put back by
index, a short answer refused). What this module adds is what vLLM needs to be told
explicitly, in every request, so that the server scores like the in-process reference:

* ``use_activation``: the sigmoid of a one-label head (``activation: sigmoid``) or the
  raw logit (``none``); vLLM has no per-label softmax for scoring;
* ``truncate_prompt_tokens: max_length``: vLLM then tokenizes the pair with
  ``truncation=True`` (longest first), as the in-process cross-encoder does; without it
  the server refuses over-length pairs. ``only_second`` has no server equivalent with the
  same total length, so it is refused rather than silently differing.

A cross-encoder checkpoint is served with its own classification head (no
``--pooler-config``); an embedding model (the bi-encoder scorer) is served with the
pooling of its sentence-transformers config, and ``/score`` answers the cosine.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.errors import InputError
from evalq.core.values import EncodingSettings, QuantizationRecord
from evalq.core.weights import model_fingerprint
from evalq.engines.rerank_http import HttpReranker
from evalq.engines.reranker import RerankSettings, described_quantization, served_fingerprint
from evalq.engines.vllm_engine import cpu_numerics_dependent, on_cpu_host
from evalq.engines.vllm_server import DEFAULT_LAUNCH, ServerLaunch, VllmServer

BACKEND_NAME = "vllm-server"
ROUTES = ("/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank")


def score_request_fields(settings: RerankSettings, kind: str) -> dict[str, Any]:
    """The request fields that make vLLM's activation and truncation explicit."""
    if settings.activation == "softmax":
        raise InputError(message="vLLM's score API applies a sigmoid or nothing; it has no "
                         "softmax over labels", field="reranker.activation",
                         fix="use activation: sigmoid or none with backend vllm")
    if kind == "cross-encoder" and settings.truncation != "longest_first":
        raise InputError(message="the vLLM server truncates a pair longest-first to "
                         "truncate_prompt_tokens; it has no 'only_second' with the same "
                         "total length, and evalq refuses rather than differ silently",
                         field="reranker.truncation",
                         fix="use truncation: longest_first, or vllm mode: engine")
    fields: dict[str, Any] = {"truncate_prompt_tokens": settings.max_length}
    if kind == "cross-encoder":
        fields["use_activation"] = settings.activation == "sigmoid"
    return fields


class VllmRerankerIdentity:
    """What a reranker that vLLM runs is, for the score cache and the manifest, whether
    an engine in this process (``engines.vllm_rerank``) or a server it started: one
    model, dtype, quantization and settings score alike in both, and the host's numerics
    class joins the key where CPU kernels below fp32 decide the scores."""

    backend: str
    kind: str
    model_path: Path
    dtype: str
    quantization: str | None
    record: QuantizationRecord | None
    settings: RerankSettings
    on_cpu: bool
    _model_fingerprint: str

    def fingerprint(self) -> str:
        # Not a server client's: its URL carries a port that changes with every start.
        return served_fingerprint(self.backend, self.kind, self._model_fingerprint, self.dtype,
                                  self.quantization, self.settings,
                                  isa_dependent=cpu_numerics_dependent(
                                      self.on_cpu, self.dtype, self.quantization,
                                      self.model_path))

    def identity(self) -> dict[str, Any]:
        """The part of :meth:`describe` both ways share: the backend and the model."""
        return {"backend": self.backend, "kind": self.kind, "model_path": str(self.model_path),
                "model_fingerprint": self._model_fingerprint, "dtype": self.dtype,
                "quantization": described_quantization(self.quantization, self.record)}


class VllmServerReranker(VllmRerankerIdentity):
    """Starts a vLLM server for ``model_path`` and scores pairs through ``route``."""

    backend = BACKEND_NAME

    def __init__(self, model_path: str | Path, *, settings: RerankSettings, kind: str,
                 log_dir: str | Path, encoding: EncodingSettings | None = None,
                 route: str = "/score", launch: ServerLaunch = DEFAULT_LAUNCH,
                 max_batch: int = 64, timeout_s: float = 120.0, retries: int = 2,
                 record: QuantizationRecord | None = None) -> None:
        """``launch``: how the server starts (its ``max_model_len`` is the settings')."""
        if route not in ROUTES:
            raise InputError(message=f"vLLM answers scores at {', '.join(ROUTES)}, not "
                             f"'{route}'", field="reranker.vllm.route",
                             fix="use route: /score (or /rerank, /v1/rerank)")
        if kind == "bi-encoder" and encoding is None:
            raise ValueError("a bi-encoder served by vLLM needs its encoding settings")
        fields = score_request_fields(settings, kind)  # refuses what it cannot do, first
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        self.kind, self.settings, self.route = kind, settings, route
        self.model_path = Path(model_path)
        self.dtype, self.quantization, self.record = launch.dtype, launch.quantization, record
        self._model_fingerprint = model_fingerprint(self.model_path)
        self.server = VllmServer(
            self.model_path, settings=encoding if kind == "bi-encoder" else None,
            log_dir=log_dir,
            launch=replace(launch, max_model_len=settings.max_length)).start()
        style = "score" if route.endswith("/score") else "rerank-api"
        try:
            self.on_cpu = on_cpu_host()  # the server runs on this host
            self.client = HttpReranker(
                self.server.url, style=style, model=self.server.served_model_name,
                activation=settings.activation, max_length=settings.max_length,
                timeout_s=timeout_s, retries=retries, max_batch=max_batch,
                tokenizer_path=self.model_path, route=route, extra_fields=fields)
        except BaseException:
            self.server.close()
            raise

    @property
    def forward_calls(self) -> int:
        """Requests sent (the server batches them itself)."""
        return int(getattr(self.client, "requests", 0))

    def describe(self) -> dict[str, Any]:
        client = self.client.describe()
        return {**self.identity(), "route": self.route, "request_fields": client["request_fields"],
                "max_batch": client["max_batch"], "server": self.server.describe(),
                "settings": self.settings.as_dict(), "fingerprint": self.fingerprint()}

    def pair_lengths(self, queries: Sequence[str], documents: Sequence[str]) -> list[int]:
        return self.client.pair_lengths(queries, documents)

    def score(self, queries: Sequence[str], documents: Sequence[str]) -> np.ndarray:
        return self.client.score(queries, documents)

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            self.server.close()

    def __enter__(self) -> VllmServerReranker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
