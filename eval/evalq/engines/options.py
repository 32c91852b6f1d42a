"""What an engine is asked to build, declared by the engines themselves.

The recipe composes these models (its ``Variant`` is an :class:`EncoderVariant` plus what
search needs; a pipeline's reranker is a :class:`RerankerModel` with
:class:`RerankerVariantOptions` variants), and every builder, probe and composition check
below the recipe is typed with them. So engines, encode and retrieve never import the
recipe, and the recipe imports this declaration instead of the backend modules.

This module holds declarations only: pydantic models, a protocol and constants, no implementation,
no heavy import, nothing of evalq but ``core``. Which backend names exist is the
registry's (``evalq.engines.registry``), which is why ``backend`` is a plain string here
and the recipe checks it against the registry.
"""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Annotated, Any, Literal, Protocol

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from evalq.core.names import PathName
from evalq.core.options import StrictOptions, at_most
from evalq.core.values import FloatDtype

Device = Literal["cpu", "cuda", "auto"]

# Placeholders of ``load.launch.<variant>.command`` and ``cwd``, filled by start_launch.
PLACEHOLDERS: dict[str, str] = {
    "model_path": "the variant's model folder (the recipe's checkpoint)",
    "host": "the host of the variant's http.url",
    "port": "the port of the variant's http.url",
    "onnx_dir": "a folder holding the ONNX graph of the variant that load.launch.<name>."
                "onnx_from names (the very graph its verdict judged), with the checkpoint's "
                "tokenizer and config (engines.onnx_serve)",
}

# The backend whose graph a ``load.launch`` command may serve (``{onnx_dir}``).
ONNX_BACKEND = "onnx"


class SettingsOverrides(BaseModel):
    """What a recipe may override of a model's encoding settings; every field optional,
    unknown keys refused (``engines.modelinfo.resolve_settings`` applies them)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    pooling: Literal["mean", "cls", "last"] | None = None
    normalize: bool | None = None
    max_length: int | None = Field(default=None, gt=0)
    truncation_side: Literal["right", "left"] | None = None
    query_prefix: str | None = None
    document_prefix: str | None = None
    padding_side: Literal["right", "left"] | None = None
    append_eos: bool | None = None


# Intra-op threads a graph runtime may be given. ONNX Runtime and OpenVINO start each
# one up front, so a million ended in a segfault after 79 s; 1024 is above the cores of
# any machine evalq runs on (documented in docs/backends.md).
MAX_THREADS = 1024
# A wait longer than a day is a hang, and an infinite or huge one (1e12 s) is refused by
# the socket layer (OverflowError) at the first request: the run ended in exit 3.
Wait = Annotated[float, Field(gt=0, le=86400, allow_inf_nan=False)]
Threads = Annotated[int | None, Field(default=None, ge=1, le=MAX_THREADS)]

# vectors.rescore multiplies the search depth: the quantized first stage returns depth ×
# rescore candidates, which the float query rescores (evalq.retrieve.search). Usual
# multipliers are 4 for int8 and 10 to 40 for binary; at 1000 a depth of 100 rescores
# 100,000 candidates per query, more than most corpora an evaluation reads hold, so a
# larger one changes nothing but what the recipe claims. 10**12 planned, and the run
# silently rescored the whole corpus; past the bound the recipe is refused
# (docs/keep-index.md).
MAX_RESCORE = 1000


# One bound for a variant's vectors.rescore and a search grid's (evalq.plan.search);
# the schema states it, so the generated key reference shows it.
Rescore = Annotated[int, Field(ge=1), at_most(
    MAX_RESCORE, "rescore", "the float query rescores depth × rescore candidates",
    f"use at most {MAX_RESCORE} (4 for int8 and 10 for binary are usual), or, to score every "
    "document with the float query, vectors.queries: float (a variant's) or quantize: none")]


def _named_file(value: str | None) -> str | None:
    """A user's graph path names a file: an empty one was silently ignored (evalq
    exported the checkpoint instead), a NUL byte ended in an empty exit 2."""
    if value is None:
        return value
    if not value.strip():
        raise ValueError("an empty 'file' names no graph; drop it to let evalq export the "
                         "checkpoint, or name the graph file")
    if "\0" in value:
        raise ValueError("the graph path holds a NUL character, which no file name can")
    return value


# ``onnx.file`` / ``openvino.file``: resolved against the recipe's folder and checked to
# be a file when the recipe is read (``evalq.recipe.graph_files``).
GraphFile = Annotated[str | None, AfterValidator(_named_file)]


class OnnxOptions(StrictOptions):
    """``onnx:`` of a variant: a ready-made graph, threads, session optimization."""

    # A user's model.onnx of the recipe's checkpoint (token states as first output);
    # unset: evalq exports the checkpoint itself.
    file: GraphFile = None
    # intra-op threads; None: ONNX Runtime's default (one per physical core)
    threads: Threads = None
    # SessionOptions.graph_optimization_level (ONNX Runtime's default is all)
    graph_optimization: Literal["disabled", "basic", "extended", "all"] = "all"


class OpenVinoOptions(StrictOptions):
    """``openvino:`` of a variant: a ready-made IR and the CPU plugin's threads."""

    # A user's openvino_model.xml (its .bin beside it) of the recipe's checkpoint, token
    # states as first output; unset: evalq converts its ONNX export.
    file: GraphFile = None
    threads: Threads = None  # None: the plugin's default
    # f32: evalq pins the CPU plugin's arithmetic. default: the plugin's own choice, what
    # a deployment without a config serves (bf16 on a CPU with AVX512-BF16 or AMX), so
    # that is what gets certified; the manifest and the cache key record what it chose.
    precision: Literal["f32", "default"] = "f32"


class HttpOptions(StrictOptions):
    """A variant's ``http:`` options (the HTTP embedding backends, openai and tei)."""

    url: str
    # The embeddings path under url: openai default /v1/embeddings (Infinity without
    # --url-prefix /v1 serves /embeddings), tei default /embed (engines.http_probe).
    route: str | None = Field(default=None, pattern=r"^/")
    model: str | None = None
    api_key_env: str | None = None
    timeout_s: Wait = 60
    retries: int = Field(default=3, ge=0)
    concurrency: int = Field(default=4, ge=1)
    max_batch: int = Field(default=64, ge=1)
    dimensions: int | None = None
    encoding_format: Literal["float", "base64"] | None = None
    prompt_name: str | None = None


class VllmOptions(StrictOptions):
    """A variant's ``vllm:`` options (backend vllm only)."""

    mode: Literal["engine", "server"] = "engine"
    quantization: str | None = None
    gpu_memory_utilization: float | None = Field(default=None, gt=0, le=1)
    max_model_len: int | None = Field(default=None, ge=1)
    enforce_eager: bool | None = None
    url: str | None = None  # server mode: connect to a running server instead of starting one
    concurrency: int = Field(default=4, ge=1)
    max_batch: int = Field(default=64, ge=1)
    startup_timeout_s: Wait = 300
    engine_args: dict[str, Any] = Field(default_factory=dict)


class RerankHttpOptions(StrictOptions):
    """A reranker variant's ``http:`` options (backends tei and rerank-api)."""

    url: str
    model: str | None = None
    api_key_env: str | None = None
    timeout_s: Wait = 60
    retries: int = Field(default=3, ge=0)
    max_batch: int = Field(default=64, ge=1)


class RerankVllmOptions(StrictOptions):
    """``mode: engine``: ``LLM.score()`` in-process (``engines.vllm_rerank``); ``mode:
    server``: evalq starts vLLM's OpenAI server and scores through ``route``
    (``engines.vllm_rerank_server``)."""

    mode: Literal["engine", "server"] = "engine"
    route: Literal["/score", "/v1/score", "/rerank", "/v1/rerank", "/v2/rerank"] = "/score"
    startup_timeout_s: Wait = 300
    max_batch: int = Field(default=64, ge=1)  # server mode: texts per request
    quantization: str | None = None
    gpu_memory_utilization: float = Field(default=0.1, gt=0, le=1)
    enforce_eager: bool | None = None
    engine_args: dict[str, Any] = Field(default_factory=dict)


class VectorOptions(StrictOptions):
    """Quantization of the output vectors (what the index stores), with optional rescoring
    of the top ``depth × rescore`` candidates with the float query; ``dims`` keeps the
    first N Matryoshka dimensions (truncated, then renormalized: encode.matryoshka) before
    anything is quantized or searched. An engine reads ``dims`` only (a server asked for
    fewer dimensions); search gets ``quantize``/``rescore`` as its own spec.
    ``queries: float`` is asymmetric search: the documents are stored quantized, and the
    float query is scored directly against what is stored (dequantized int8, or ±1 for
    binary), with no quantized first stage (``evalq.retrieve.vectorquant``)."""

    quantize: Literal["none", "int8", "binary"] = "none"
    rescore: Rescore | None = None
    queries: Literal["quantized", "float"] = "quantized"
    dims: int | None = Field(default=None, ge=1)


class EncoderVariant(StrictOptions):
    """One embedding variant as its backend builds it: the backend, dtype, device, an
    alternative checkpoint, quantization, encoding overrides, batch budget, the output
    vectors and each backend's own options block. The recipe's ``Variant`` adds what
    search needs (``index``) and the checks that need the registry."""

    name: PathName
    backend: str = "inprocess"
    dtype: FloatDtype = "float32"
    device: Device = "auto"
    model: str | None = None  # a different checkpoint (e.g. a pre-quantized W8A8 folder)
    quantization: dict[str, Any] | None = None
    vectors: VectorOptions = VectorOptions()
    encoding: SettingsOverrides = SettingsOverrides()
    batch_tokens: int | None = Field(default=None, ge=16)
    vllm: VllmOptions | None = None
    http: HttpOptions | None = None
    onnx: OnnxOptions | None = None
    openvino: OpenVinoOptions | None = None


class RerankerVariantOptions(StrictOptions):
    """One reranker variant as its backend builds it (the recipe's ``RerankerVariant``
    adds the checks against the registry)."""

    name: PathName
    backend: str = "inprocess"
    dtype: FloatDtype = "float32"
    device: Device = "auto"
    model: str | None = None  # another checkpoint of the same reranker
    quantization: dict[str, Any] | None = None
    batch_tokens: int | None = Field(default=None, ge=16)
    http: RerankHttpOptions | None = None
    vllm: RerankVllmOptions | None = None
    onnx: OnnxOptions | None = None  # a user's model.onnx of the cross-encoder (logits)
    openvino: OpenVinoOptions | None = None  # a user's openvino_model.xml (logits)


class RerankerModel(StrictOptions):
    """The reranker model a pipeline scores with, as every reranker backend reads it: the
    checkpoint, its kind, the activation (and label) that turns logits into scores, and
    its lengths. The recipe's ``RerankerSpec`` adds its variants."""

    model: str  # folder | pkg:<module> | fixture:minilm-cross-encoder | cached HF id
    kind: Literal["cross-encoder", "bi-encoder"] = "cross-encoder"
    activation: Literal["sigmoid", "none", "softmax"] = "sigmoid"
    label: int = Field(default=0, ge=0)
    max_length: int | None = Field(default=None, ge=8)
    truncation: Literal["longest_first", "only_second"] = "longest_first"


def used_placeholders(args: Sequence[str]) -> list[str]:
    """The ``{name}`` fields of a launch command's arguments, in order (``{{`` is a
    literal brace); a malformed one (an unclosed ``{``) raises ValueError."""
    return [name for arg in args for _, name, _, _ in string.Formatter().parse(arg)
            if name is not None]


class LaunchCommand(Protocol):
    """What starting a server needs of a recipe's ``load.launch.<variant>`` entry."""

    # Read-only: the recipe's entry is a frozen model.
    @property
    def command(self) -> list[str]: ...
    @property
    def health(self) -> str: ...
    @property
    def startup_timeout_s(self) -> float: ...
    @property
    def env(self) -> dict[str, str]: ...
    @property
    def cwd(self) -> str | None: ...
    @property
    def onnx_from(self) -> str | None:  # the onnx variant whose graph ``{onnx_dir}`` serves
        ...


__all__ = [
    "MAX_THREADS",
    "ONNX_BACKEND",
    "PLACEHOLDERS",
    "Device",
    "EncoderVariant",
    "GraphFile",
    "HttpOptions",
    "LaunchCommand",
    "OnnxOptions",
    "OpenVinoOptions",
    "RerankHttpOptions",
    "RerankVllmOptions",
    "RerankerModel",
    "RerankerVariantOptions",
    "SettingsOverrides",
    "Threads",
    "VectorOptions",
    "VllmOptions",
    "used_placeholders",
]
