"""Client for any OpenAI-compatible ``/v1/embeddings`` server (vLLM, Infinity, TEI's route).

The OpenAI schema has no fields for pooling, normalization or truncation, so what this
client can promise is limited and said plainly in :meth:`OpenAIEncoder.describe`:

- server-specific fields that make those settings explicit (vLLM's ``use_activation``,
  ``truncate_prompt_tokens``) go in ``extra_fields`` and are sent with every request;
- ``settings.normalize`` is enforced client-side (L2 normalization is idempotent), so a
  server that does not normalize still yields unit vectors — and a server that does, while
  the recipe says ``normalize: false``, is caught by the parity preflight, not hidden;
- token counts (used only to pack batches) come from a local tokenizer when one is given,
  otherwise from a documented estimate.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Required, TypedDict, Unpack

import numpy as np

from evalq.core.errors import BackendUnavailableError, InputError
from evalq.core.protocols import Encoder
from evalq.core.values import EncodingSettings, vector_problem
from evalq.engines.context import BuildContext
from evalq.engines.http_common import HttpJsonClient, RetryPolicy, read_api_key, split_batches
from evalq.engines.options import EncoderVariant, HttpOptions
from evalq.engines.replies import parse_openai_reply
from evalq.engines.server_identity import PROBE_TEXT, server_identity
from evalq.engines.spec import REMOTE_SERVER, BackendSpec
from evalq.engines.tokenizer_identity import TokenizerIdentity, load_tokenizer

EncodingFormat = Literal["float", "base64"]
BACKEND_NAME = "openai"



_WORD = re.compile(r"\w+|[^\w\s]")


class TokenCounter:
    """Token counts after truncation: exact with a local tokenizer, estimated without.

    The estimate (words and punctuation marks, +2 for special tokens) is within ~20% of
    WordPiece counts on English text; it only orders and packs batches, never changes a
    vector, and ``describe()`` says which one was used.
    """

    def __init__(self, settings: EncodingSettings, tokenizer_path: str | Path | None,
                 known: TokenizerIdentity | None = None) -> None:
        """``known``: what a certificate says AutoTokenizer resolved for the folder
        (``evalq verify --url``; ``engines.tokenizer_identity``)."""
        self.settings = settings
        self.exact = tokenizer_path is not None
        self._tokenizer: Any = None
        if tokenizer_path is not None:
            self._tokenizer = load_tokenizer(tokenizer_path, known)
            self._tokenizer.truncation_side = settings.truncation_side

    @property
    def method(self) -> str:
        return "tokenizer" if self.exact else "estimate(words+punct+2)"

    def __call__(self, texts: Sequence[str]) -> list[int]:
        limit = self.settings.max_length
        if self._tokenizer is not None:
            enc = self._tokenizer(
                list(texts), truncation=True, max_length=limit, add_special_tokens=True
            )
            return [len(ids) for ids in enc["input_ids"]]
        return [min(limit, len(_WORD.findall(t)) + 2) for t in texts]


def l2_normalize(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise BackendUnavailableError("the server returned an all-zero embedding")
    return (vectors / norms).astype(np.float32, copy=False)


class HttpClientArgs(TypedDict, total=False):
    """What a served embedding backend hands on to :class:`HttpEncoderBase` unchanged:
    the encoding settings, the key's variable, retries and timeouts, concurrency, the
    tokenizer that counts tokens and the folder of server probes (defaults there)."""

    settings: Required[EncodingSettings]
    api_key_env: str | None
    timeout_s: float
    retries: int
    backoff_s: float
    concurrency: int
    tokenizer_path: str | Path | None
    tokenizer: TokenizerIdentity | None
    probe_store: str | Path | None


class HttpEncoderBase:
    """What every encoder over an HTTP embedding server shares: the client, token counts,
    route listing, batching over concurrent requests, the server's identity and close.

    Subclasses (``OpenAIEncoder`` here, ``TeiEncoder`` in ``engines.tei_http``) add their
    request and reply formats; keeping the shared half here keeps one retry, batching and
    identity behaviour for every served embedding backend.
    """

    backend: str

    def __init__(self, url: str, route: str, *, settings: EncodingSettings,
                 api_key_env: str | None = None, timeout_s: float = 120.0, retries: int = 3,
                 backoff_s: float = 0.5, concurrency: int = 4,
                 tokenizer_path: str | Path | None = None,
                 tokenizer: TokenizerIdentity | None = None,
                 probe_store: str | Path | None = None) -> None:
        """The arguments every served embedding backend takes, with their defaults; a
        subclass takes its own and hands these on as :class:`HttpClientArgs`."""
        policy = RetryPolicy(timeout_s=timeout_s, retries=retries, backoff_s=backoff_s)
        self.url = url.rstrip("/")
        self.route = "/" + route.lstrip("/")
        self.settings = settings
        self.api_key_env = api_key_env
        self._counter = TokenCounter(settings, tokenizer_path, tokenizer)
        self._http = HttpJsonClient(self.url, policy=policy,
                                    api_key=read_api_key(api_key_env), concurrency=concurrency)
        self.probe_store = Path(probe_store) if probe_store is not None else None
        self.server_identity: dict[str, Any] | None = None
        self.max_batch = 1

    def _identify(self, label: str, describe: Callable[[], Any]) -> None:
        """Ask the server once what it is (``describe``) and embed the probe text, when a
        probe store is set; the answer becomes part of the cache key."""
        if self.probe_store is not None and self.server_identity is None:
            self.server_identity = server_identity(
                label, describe, lambda: self._embed_batch([PROBE_TEXT])[0], self.probe_store)

    def _key(self, own: Mapping[str, Any]) -> str:
        """The cache key: the server's identity, the backend and the encoding settings,
        with what the subclass's vectors also depend on (``own``)."""
        key = {"server": self.server_identity, "backend": self.backend, **own,
               "settings": self.settings.fingerprint()}
        return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]

    def _described(self, own: Mapping[str, Any]) -> dict[str, Any]:
        """The manifest's record of the client: what every served backend states (where,
        which key variable, the retry policy, batching), with the subclass's ``own``."""
        return {"backend": self.backend, "url": self.url, "route": self.route, **own,
                "server_identity": self.server_identity,
                "api_key_env": self.api_key_env,  # the variable's name, never its value
                "token_lengths": self._counter.method, "max_batch": self.max_batch,
                "concurrency": self._http.concurrency,
                "timeout_s": self._http.policy.timeout_s,
                "retries": self._http.policy.retries, "settings": self.settings.as_dict()}

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        return self._counter(texts)

    def server_routes(self) -> Any:
        """What the server lists about itself (used by ``http_probe``)."""
        return self._http.server_routes()

    def _embed_batched(self, texts: Sequence[str]) -> np.ndarray:
        batches = split_batches(list(texts), self.max_batch)
        return np.concatenate(self._http.map_concurrent(self._embed_batch, batches), axis=0)

    def _embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        raise NotImplementedError

    def close(self) -> None:
        self._http.close()


class OpenAIEncoder(HttpEncoderBase):
    """Encoder over ``POST {url}/v1/embeddings``; ``url`` is the server root (no ``/v1``)."""

    backend = BACKEND_NAME

    def __init__(
        self,
        url: str,
        model: str,
        *,
        max_batch: int = 64,
        dimensions: int | None = None,
        encoding_format: EncodingFormat | None = None,
        extra_fields: Mapping[str, Any] | None = None,
        identity: str | None = None,
        route: str | None = None,
        **common: Unpack[HttpClientArgs],
    ) -> None:
        """``identity`` keys the embedding cache (default: url + model); a server started on
        a random port passes the weights' fingerprint instead so reruns hit the cache.
        ``route``: the embeddings path under ``url`` (Infinity without ``--url-prefix /v1``
        serves ``/embeddings``); unset, ``url`` is the root and the route ``/v1/embeddings``.
        ``probe_store`` (a folder) adds what the server reports on ``/v1/models`` and its
        embedding of a probe text to the key (``server_identity``)."""
        if route is None:
            if url.rstrip("/").endswith("/v1"):
                url = url.rstrip("/")[: -len("/v1")]
            route = "/v1/embeddings"
        super().__init__(url, route, **common)
        self.model = model
        self.max_batch = max_batch
        self.dimensions = dimensions
        self.encoding_format: EncodingFormat | None = encoding_format
        self.extra_fields = dict(extra_fields or {})
        self.identity = identity if identity is not None else f"{self.url}|{model}"
        self.served_model: str | None = None
        self.requests = 0

    def fingerprint(self) -> str:
        self._identify(f"openai|{self.url}|{self.model}",
                       lambda: self._http.get_json("/v1/models"))
        return self._key({"identity": self.identity, "model": self.model,
                          "dimensions": self.dimensions, "extra_fields": self.extra_fields})

    def describe(self) -> dict[str, Any]:
        return self._described({
            "model": self.model, "served_model": self.served_model,
            "dimensions": self.dimensions,
            "encoding_format": self.encoding_format or "float",
            "request_fields": self.extra_fields,
            "client_side_normalize": self.settings.normalize})

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimensions or 0), dtype=np.float32)
        out = self.embed_raw(texts)
        if self.settings.normalize:
            problem = vector_problem(out)
            if problem is not None:  # before normalizing hides NaN behind a division
                raise InputError(message=f"{self.url}{self.route} returned a batch {problem}",
                                 field="url", fix="fix or restart the server, then rerun: "
                                 "finished chunks are reused")
            return l2_normalize(out)
        return out

    def embed_raw(self, texts: Sequence[str]) -> np.ndarray:
        """What the server returned, before client-side normalization (the route probe
        reads the server's own norm from it)."""
        return self._embed_batched(texts)

    # -- internals ---------------------------------------------------------------------------

    def _payload(self, texts: Sequence[str]) -> dict[str, Any]:
        payload: dict[str, Any] = {"model": self.model, "input": list(texts)}
        if self.dimensions is not None:
            payload["dimensions"] = self.dimensions
        if self.encoding_format is not None:
            payload["encoding_format"] = self.encoding_format
        payload.update(self.extra_fields)
        return payload

    def _embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        body = self._http.post_json(self.route, self._payload(texts))
        self.requests += 1
        vectors, served = parse_openai_reply(body, len(texts), f"{self.url}{self.route}",
                                             self.encoding_format or "float")
        if self.served_model is None and served is not None:
            self.served_model = served
        if self.dimensions is not None and vectors.shape[1] != self.dimensions:
            raise InputError(
                message=f"asked {self.url} for {self.dimensions} dimensions, "
                f"got {vectors.shape[1]}",
                field="dimensions",
                fix="remove dimensions or use a model that supports it (Matryoshka)",
            )
        return vectors


def build(variant: EncoderVariant, ctx: BuildContext) -> Encoder:
    http = variant.http
    assert http is not None  # the recipe requires it
    return OpenAIEncoder(
        http.url, http.model or str(ctx.model_path), settings=ctx.settings,
        api_key_env=http.api_key_env, timeout_s=http.timeout_s, retries=http.retries,
        concurrency=http.concurrency, max_batch=http.max_batch,
        # a Matryoshka variant asks the server for its width (vectors.dims)
        dimensions=http.dimensions if http.dimensions is not None else variant.vectors.dims,
        encoding_format=http.encoding_format, tokenizer_path=ctx.model_path, route=http.route,
        tokenizer=ctx.tokenizer, probe_store=ctx.cache_dir / "servers",
    )


SPEC = BackendSpec(BACKEND_NAME, "embedding", "http", build, quantized_by="server",
                   options_key="http", options_model=HttpOptions, options_required=True,
                   devices=(), dtypes=("float32",), self_batching=("embedding",),
                   batch_dependence=lambda variant: REMOTE_SERVER, ray=True,
                   load_api="openai", http_probe=True)
