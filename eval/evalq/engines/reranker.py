"""Rerankers: score (query, document) pairs. The protocol and the in-process scorers.

A cross-encoder reads query and document together, so nothing can be precomputed:
reranking the top N costs N forward passes per query. That is why rerankers get
quantized first, and why their scores must be compared to the full-precision reranker on
*identical* candidate lists (``evalq.measure.fidelity``).

Two in-process scorers:

* :class:`CrossEncoderReranker`: ``AutoModelForSequenceClassification`` loaded through
  the same quantization registry as embedding models (dtype, bitsandbytes, torch dynamic
  int8), pairs packed by the same token-budget packing as texts. The activation is
  explicit (``sigmoid`` | ``none`` | ``softmax`` with a label index) and recorded, because
  engines disagree on it: sentence-transformers applies a sigmoid to one-label heads,
  vLLM's ``use_activation`` too, TEI's ``raw_scores`` turns it off. Pairs are tokenized
  by ``pairfront`` and the activation is :func:`apply_activation`, which the ONNX Runtime
  and OpenVINO rerankers (``graph_reranker``) use too.
* :class:`BiEncoderScorer`: an embedding model scoring a pair by the cosine of its two
  embeddings (what vLLM's ``/score`` does with an embedding model).
"""

from __future__ import annotations

import gc
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from evalq.core.errors import InputError
from evalq.core.host import numerics_key
from evalq.core.values import EncodingSettings, QuantizationRecord
from evalq.core.weights import model_fingerprint
from evalq.engines.context import RerankerContext
from evalq.engines.inprocess import InProcessEncoder, cpu_isa_dependent, input_device
from evalq.engines.modelinfo import default_settings, resolve_settings
from evalq.engines.options import RerankerModel
from evalq.engines.pairfront import PairFront
from evalq.engines.quantize import load_model
from evalq.engines.quantize.loading import auto_class
from evalq.engines.spec import BackendSpec

Activation = Literal["sigmoid", "none", "softmax"]
PairTruncation = Literal["longest_first", "only_second"]


@dataclass(frozen=True)
class RerankSettings:
    """Everything besides the weights that changes a reranker's score."""

    activation: Activation = "sigmoid"
    label: int = 0  # which logit is "relevant" (softmax heads, multi-label heads)
    max_length: int = 256
    truncation: PairTruncation = "longest_first"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def fingerprint(self) -> str:
        blob = json.dumps(self.as_dict(), sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


@runtime_checkable
class Reranker(Protocol):
    """Scores already-paired texts; batching and caching live in ``evalq.encode.pairs``."""

    kind: str  # "cross-encoder" | "bi-encoder"

    def fingerprint(self) -> str:
        """Stable key of weights + quantization + settings (the score cache key)."""
        ...

    def describe(self) -> dict[str, Any]:
        ...

    def pair_lengths(self, queries: Sequence[str], documents: Sequence[str]) -> list[int]:
        """Tokens of each pair after truncation (for packing batches by token budget)."""
        ...

    def score(self, queries: Sequence[str], documents: Sequence[str]) -> np.ndarray:
        """float64 ``(n,)``: the score of ``(queries[i], documents[i])``."""
        ...

    def close(self) -> None:
        ...


def served_fingerprint(backend: str, kind: str, model: str, dtype: str,
                       quantization: str | None, settings: RerankSettings, *,
                       isa_dependent: bool = False) -> str:
    """The score-cache identity of a reranker that vLLM serves (engine or server): what
    decides its scores, and nothing that changes between starts (a server's port).
    ``isa_dependent`` (CPU kernels below fp32) folds in this host's numerics class."""
    blob = json.dumps({"backend": backend, "kind": kind, "model": model, "dtype": dtype,
                       "quantization": quantization, "settings": settings.fingerprint(),
                       **({"numerics": numerics_key()} if isa_dependent else {})},
                      sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def described_quantization(vllm_method: str | None,
                           record: QuantizationRecord | None) -> dict[str, Any]:
    """The manifest's ``quantization`` of a vLLM-served reranker: the record of the
    checkpoint evalq made (W8A8 int8: bits, weight bytes, llm-compressor parameters), else
    vLLM's own method name (or the dtype) with nothing measured."""
    if record is not None:
        return record.as_dict()
    return {"method": vllm_method or "dtype", "bits": None, "weight_bytes": None,
            "params": {}}


def apply_activation(logits: Any, settings: RerankSettings) -> Any:
    """``(B, labels)`` logits -> ``(B,)`` scores, as the recipe says (torch tensors)."""
    import torch

    if settings.activation == "softmax":
        return torch.softmax(logits.float(), dim=-1)[:, settings.label]
    picked = logits.float()[:, settings.label]
    return torch.sigmoid(picked) if settings.activation == "sigmoid" else picked


def num_labels(model_path: Path) -> int:
    """The classification head's label count, as transformers reads the config; a
    checkpoint whose config names its architectures and none is a sequence classifier
    (an embedding model's ``BertModel``) has no trained head, and transformers would
    score with a randomly initialised one, so it is refused (exit 2) instead."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(str(model_path), local_files_only=True)
    architectures = list(getattr(config, "architectures", None) or [])
    if architectures and not any(a.endswith("ForSequenceClassification")
                                 for a in architectures):
        raise InputError(
            message=f"{model_path} is a {', '.join(architectures)} checkpoint with no "
            "trained classification head: a cross-encoder on it would score with a "
            "randomly initialised head", file=Path(model_path) / "config.json",
            field="reranker.model",
            fix="point reranker.model at a cross-encoder (a ...ForSequenceClassification "
            "checkpoint), or set kind: bi-encoder to score by the cosine of this embedding "
            "model's vectors")
    return int(config.num_labels)


def check_head(num_labels: int, settings: RerankSettings, model_path: Path) -> None:
    """Refuse a head the activation cannot read (before any pair is scored)."""
    if settings.label >= num_labels or settings.label < 0:
        raise InputError(
            message=f"the classification head of {model_path} has {num_labels} label(s); "
            f"label {settings.label} does not exist",
            field="reranker.label", fix=f"use a label index in 0..{num_labels - 1}")
    if settings.activation == "softmax" and num_labels < 2:
        raise InputError(
            message=f"softmax over a one-label head ({model_path}) is always 1.0",
            field="reranker.activation", fix="use activation: sigmoid or none")
    if settings.activation != "softmax" and num_labels > 1 and settings.label == 0:
        raise InputError(
            message=f"the classification head of {model_path} has {num_labels} labels; "
            f"activation '{settings.activation}' needs a one-label head or an explicit label",
            field="reranker.label",
            fix="set activation: softmax with label: <index of 'relevant'>, or label: N")


class CrossEncoderReranker:
    """``AutoModelForSequenceClassification`` in-process, any registered quantization."""

    kind = "cross-encoder"
    backend = "inprocess"

    def __init__(self, model_path: str | Path, *, settings: RerankSettings,
                 dtype: str = "float32", quantization: Mapping[str, Any] | None = None,
                 device: str = "cpu") -> None:
        self.model_path = Path(model_path)
        self.settings = settings
        self.dtype = dtype
        self.device = device
        self.forward_calls = 0
        check_head(num_labels(self.model_path), settings, self.model_path)
        self._model_fingerprint = model_fingerprint(self.model_path)
        with auto_class("AutoModelForSequenceClassification"):
            model, record = load_model(self.model_path, dtype=dtype, quantization=quantization,
                                       device=device)
        self._model: Any = model
        self.record: QuantizationRecord = record
        self._front = PairFront(self.model_path, settings)
        self._input_device = input_device(model, device)

    def fingerprint(self) -> str:
        blob = json.dumps({"backend": self.backend, "kind": self.kind,
                           "model": self._model_fingerprint, "dtype": self.dtype,
                           "quantization": {"method": self.record.method,
                                            "params": self.record.params},
                           "settings": self.settings.fingerprint(),
                           # int8 / reduced-precision CPU scores belong to one class
                           **({"numerics": numerics_key()} if cpu_isa_dependent(
                               self.device, self.record.method, self.dtype) else {})},
                          sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def describe(self) -> dict[str, Any]:
        import torch
        import transformers

        return {"backend": self.backend, "kind": self.kind, "model_path": str(self.model_path),
                "model_fingerprint": self._model_fingerprint, "dtype": self.dtype,
                "device": self.device, "threads": torch.get_num_threads(),
                "num_labels": int(self._model.config.num_labels),
                "versions": {"torch": torch.__version__,
                             "transformers": transformers.__version__},
                "quantization": self.record.as_dict(), "settings": self.settings.as_dict(),
                "fingerprint": self.fingerprint()}

    def pair_lengths(self, queries: Sequence[str], documents: Sequence[str]) -> list[int]:
        return self._front.pair_lengths(queries, documents)

    def score(self, queries: Sequence[str], documents: Sequence[str]) -> np.ndarray:
        import torch

        if len(queries) != len(documents):
            raise ValueError(f"{len(queries)} queries for {len(documents)} documents")
        if not queries:
            return np.zeros(0, dtype=np.float64)
        if self._model is None:
            raise RuntimeError("CrossEncoderReranker.score called after close()")
        batch = self._front.encode(queries, documents, padding=True, return_tensors="pt")
        inputs = {k: v.to(self._input_device) for k, v in batch.items()}
        with torch.inference_mode():
            logits = self._model(**inputs).logits
            self.forward_calls += 1
            scores = apply_activation(logits, self.settings)
        return scores.to(device="cpu", dtype=torch.float64).numpy()

    def close(self) -> None:
        if self._model is not None:
            self._model = None
            gc.collect()


class Embeddings(Protocol):
    """How a bi-encoder scorer gets vectors: ``texts`` (and possibly more) embedded by
    ``encoder`` for ``role``, as ``{text: float32 vector}``. ``evalq.encode.pairs`` supplies
    one that goes through the run's embedding cache."""

    def __call__(self, encoder: Any, role: str, texts: Sequence[str]
                 ) -> Mapping[str, np.ndarray]: ...


class BiEncoderScorer:
    """An embedding model as a pair scorer: cosine of the query's and document's vectors.

    Texts are embedded once each (token-budget batches through ``encode_texts``, by
    ``embeddings``; in a run, through the embedding cache) and the pairs are scored from
    the vectors, so a pair list with N documents per query costs the unique texts, not
    2N passes. The vectors are kept for the scorer's lifetime: ``score_pairs`` calls it
    once per cache chunk, and a document proposed for many queries lands in many chunks
    (measured on the rerank-pipeline recipe: 1,700 pairs in 4 chunks embedded ~3.5x the
    unique texts before, which made bf16 take minutes).
    """

    kind = "bi-encoder"
    backend = "inprocess"

    def __init__(self, model_path: str | Path, *, settings: EncodingSettings,
                 dtype: str = "float32", quantization: Mapping[str, Any] | None = None,
                 device: str = "cpu", batch_tokens: int = 2048,
                 embeddings: Embeddings) -> None:
        if not settings.normalize:
            settings = EncodingSettings(**{**settings.as_dict(), "normalize": True})
        self.settings = settings
        self.batch_tokens = batch_tokens
        self._encoder = InProcessEncoder(model_path, settings=settings, dtype=dtype,
                                         quantization=quantization, device=device)
        self.record = self._encoder.record
        self._embed = embeddings
        self._vectors: dict[tuple[str, str], np.ndarray] = {}  # (role, text) -> unit vector

    @property
    def forward_calls(self) -> int:
        return self._encoder.forward_calls

    def fingerprint(self) -> str:
        blob = json.dumps({"kind": self.kind, "encoder": self._encoder.fingerprint()},
                          sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def describe(self) -> dict[str, Any]:
        return {**self._encoder.describe(), "kind": self.kind, "score": "cosine",
                "fingerprint": self.fingerprint()}

    def pair_lengths(self, queries: Sequence[str], documents: Sequence[str]) -> list[int]:
        q = self._encoder.token_lengths(list(queries))
        d = self._encoder.token_lengths(list(documents))
        return [a + b for a, b in zip(q, d)]

    def score(self, queries: Sequence[str], documents: Sequence[str]) -> np.ndarray:
        if len(queries) != len(documents):
            raise ValueError(f"{len(queries)} queries for {len(documents)} documents")
        if not queries:
            return np.zeros(0, dtype=np.float64)
        for role, texts in (("query", queries), ("document", documents)):
            new = list(dict.fromkeys(t for t in texts if (role, t) not in self._vectors))
            if new:  # float32 as encoded; scored in float64 below
                self._vectors.update(((role, t), v)
                                     for t, v in self._embed(self._encoder, role, new).items())
        q = np.stack([self._vectors[("query", t)] for t in queries]).astype(np.float64)
        d = np.stack([self._vectors[("document", t)] for t in documents]).astype(np.float64)
        return np.einsum("ij,ij->i", q, d)

    def close(self) -> None:
        self._vectors.clear()
        self._encoder.close()


# -- the in-process reranker backend's declaration ------------------------------------


def rerank_settings(spec: RerankerModel, model_path: Path) -> RerankSettings:
    """The score settings of a pipeline's reranker; the maximum length defaults to the
    model's own."""
    max_length = spec.max_length or default_settings(model_path).max_length
    return RerankSettings(activation=spec.activation, label=spec.label, max_length=max_length,
                          truncation=spec.truncation)


def bi_encoder_settings(spec: RerankerModel, model_path: Path) -> EncodingSettings:
    """A bi-encoder scorer's encoding settings: the model's, with the spec's length."""
    return resolve_settings(model_path, {"max_length": spec.max_length}
                            if spec.max_length else {})


def build(ctx: RerankerContext) -> Reranker:
    spec, variant = ctx.spec, ctx.variant
    if spec.kind == "bi-encoder":
        return BiEncoderScorer(ctx.model_path, settings=bi_encoder_settings(spec, ctx.model_path),
                               dtype=variant.dtype, quantization=variant.quantization,
                               device=ctx.device, batch_tokens=ctx.batch_tokens,
                               embeddings=ctx.embeddings)
    return CrossEncoderReranker(ctx.model_path, settings=rerank_settings(spec, ctx.model_path),
                                dtype=variant.dtype, quantization=variant.quantization,
                                device=ctx.device)


# The bi-encoder scorer embeds unique texts in its own batches; cross-encoder pairs are
# packed by evalq to the token budget.
SPEC = BackendSpec("inprocess", "reranker", "in-process", build, quantized_by="evalq",
                   model_kinds=("cross-encoder", "bi-encoder"), self_batching=("bi-encoder",))
