"""Rerankers over HTTP: TEI's native ``/rerank`` and the Cohere/Jina-style ``/v1/rerank``
(which vLLM, Infinity and most hosted rerank APIs answer).

Both take one query and a list of texts and answer with ``(index, score)`` items, sorted
by score rather than in request order, so the client puts them back by index and refuses
an answer that misses a text (a short answer scored as zeros would be a silent lie), and
every reply is checked against its schema first (``evalq.engines.replies``: a score that
is a bool, a string, null or NaN is refused, never read as a number).
Every field that changes a score is sent explicitly: TEI's ``raw_scores`` (the activation:
``raw_scores: true`` is ``activation: none``), ``truncate`` and ``truncation_direction``;
for ``/v1/rerank`` ``top_n`` (all of them) and ``return_documents: false``. TEI's ``/info``
goes into the manifest, as for embeddings.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.errors import InputError
from evalq.engines.context import RerankerContext
from evalq.engines.http_common import HttpJsonClient, RetryPolicy, read_api_key, split_batches
from evalq.engines.options import RerankerModel, RerankerVariantOptions, RerankHttpOptions
from evalq.engines.replies import parse_rerank_reply
from evalq.engines.spec import BackendSpec

# What a TEI server's /info says about the model behind it (a field it leaves out is None).
_INFO_IDENTITY = ("model_id", "model_sha", "model_dtype", "model_type", "max_input_length")
# The probe: fixed pairs whose scores tell one served model from another.
_PROBE_QUERY = "what is the boiling point of water at sea level"
_PROBE_TEXTS = ("Water boils at 100 degrees Celsius at sea level.",
                "The Eiffel Tower is in Paris.",
                "At higher altitudes water boils at a lower temperature.")
_PROBE_DECIMALS = 3




class HttpReranker:
    """``style``: ``tei`` (``POST /rerank``), ``rerank-api`` (``POST /v1/rerank``) or
    ``score`` (vLLM's ``POST /score``: ``queries`` + ``documents``, answered as ``data``
    items of ``index`` and ``score``). ``route`` replaces the style's default path (vLLM
    also answers ``/rerank`` and ``/v2/rerank``); ``extra_fields`` go into every body
    (vLLM's ``use_activation``, ``truncate_prompt_tokens``)."""

    kind = "cross-encoder"

    def __init__(self, url: str, *, style: str, model: str | None, activation: str,
                 max_length: int, api_key_env: str | None = None, timeout_s: float = 60,
                 retries: int = 3, backoff_s: float = 0.5, max_batch: int = 64,
                 tokenizer_path: str | Path | None = None, route: str | None = None,
                 extra_fields: dict[str, Any] | None = None) -> None:
        if style not in ("tei", "rerank-api", "score"):
            raise ValueError(f"unknown rerank API style {style!r}")
        if style == "tei" and activation not in ("sigmoid", "none"):
            raise InputError(message=f"TEI's /rerank returns sigmoid or raw scores, not "
                             f"'{activation}'", field="reranker.activation",
                             fix="use activation: sigmoid or none with backend tei")
        self.url, self.style, self.model = url.rstrip("/"), style, model
        self.activation, self.max_length = activation, max_length
        self.backend = style
        self.route = route or {"tei": "/rerank", "rerank-api": "/v1/rerank",
                               "score": "/score"}[style]
        self.extra_fields = dict(extra_fields or {})
        self.requests = 0
        self.api_key_env = api_key_env
        self._http = HttpJsonClient(self.url, policy=RetryPolicy(timeout_s, retries, backoff_s),
                                    api_key=read_api_key(api_key_env))
        self.info: dict[str, Any] | None = None
        self.max_batch = max_batch
        self._fingerprint: str | None = None
        self._served_model: Any = None  # the "model" a /v1/rerank answer names
        if style == "tei":
            info = self._http.get_json("/info")
            if not isinstance(info, dict):
                raise InputError(message=f"{self.url}/info did not return a JSON object",
                                 field="http.url", fix="point at a text-embeddings-inference "
                                 "server started with a reranker model")
            self.info = info
            server = info.get("max_client_batch_size")
            if isinstance(server, int) and server > 0:
                self.max_batch = min(max_batch, server)
        self._tokenizer: Any = None
        if tokenizer_path is not None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_path),
                                                            local_files_only=True)

    def fingerprint(self) -> str:
        """The score-cache identity: the settings, what the server says it serves, and a
        probe of its scores on fixed pairs. A URL names a place, not a model: a different
        model redeployed behind it answers the probe differently, so it gets a new key."""
        if self._fingerprint is not None:
            return self._fingerprint
        probe = self._probe_server()
        key = {"backend": self.style, "url_model": self.model,
               "server": {k: (self.info or {}).get(k) for k in _INFO_IDENTITY},
               "served_model": self._served_model, "probe": probe,
               "activation": self.activation, "max_length": self.max_length}
        if self.info is None:  # no server identity to read: the URL stands in for it
            key["url"] = self.url
        self._fingerprint = hashlib.sha256(json.dumps(key, sort_keys=True).encode()
                                           ).hexdigest()[:16]
        return self._fingerprint

    def _probe_server(self) -> list[float]:
        """The server's scores of the fixed probe pairs, rounded so a server's run-to-run
        jitter keeps its key (a rounding edge costs a recompute, never a wrong score).
        Not counted in ``requests``: it scores nothing of the run's."""
        sent = self.requests
        scores = self.score([_PROBE_QUERY] * len(_PROBE_TEXTS), list(_PROBE_TEXTS))
        self.requests = sent
        return [round(float(s), _PROBE_DECIMALS) for s in scores]

    def describe(self) -> dict[str, Any]:
        return {"backend": self.style, "kind": self.kind, "url": self.url, "model": self.model,
                "api_key_env": self.api_key_env, "info": self.info,
                "route": self.route, "request_fields": self._fields(), "max_batch": self.max_batch,
                "settings": {"activation": self.activation, "max_length": self.max_length},
                "fingerprint": self.fingerprint()}

    def pair_lengths(self, queries: Sequence[str], documents: Sequence[str]) -> list[int]:
        if self._tokenizer is None:
            return [min(self.max_length, len(q.split()) + len(d.split()) + 3)
                    for q, d in zip(queries, documents)]
        encoded = self._tokenizer(list(queries), list(documents), truncation=True,
                                  max_length=self.max_length, return_attention_mask=False)
        return [len(ids) for ids in encoded["input_ids"]]

    def _fields(self) -> dict[str, Any]:
        if self.style == "tei":
            return {"raw_scores": self.activation == "none", "truncate": True,
                    "truncation_direction": "Right", "return_text": False,
                    **self.extra_fields}
        fields: dict[str, Any] = {} if self.style == "score" else {"return_documents": False}
        if self.model:
            fields["model"] = self.model
        return {**fields, **self.extra_fields}

    def score(self, queries: Sequence[str], documents: Sequence[str]) -> np.ndarray:
        if len(queries) != len(documents):
            raise ValueError(f"{len(queries)} queries for {len(documents)} documents")
        out = np.empty(len(queries), dtype=np.float64)
        groups: dict[str, list[int]] = {}
        for i, q in enumerate(queries):
            groups.setdefault(q, []).append(i)
        for query, rows in groups.items():
            for part in split_batches(rows, self.max_batch):
                texts = [documents[i] for i in part]
                out[list(part)] = self._request(query, texts)
        return out

    def _request(self, query: str, texts: list[str]) -> np.ndarray:
        route = self.route
        self.requests += 1
        if self.style == "tei":
            body = self._http.post_json(route, {"query": query, "texts": texts,
                                                **self._fields()})
        elif self.style == "score":
            body = self._http.post_json(route, {"queries": query, "documents": texts,
                                                **self._fields()})
        else:
            body = self._http.post_json(route, {"query": query, "documents": texts,
                                                "top_n": len(texts), **self._fields()})
            if isinstance(body, dict) and isinstance(body.get("model"), str):
                self._served_model = body["model"]  # part of a served reranker's key
        scores = parse_rerank_reply(body, len(texts), f"{self.url}{route}", self.style)
        missing = int(np.isnan(scores).sum())
        if missing:
            raise InputError(
                message=f"{self.url}{route} returned scores for {len(texts) - missing} of "
                f"{len(texts)} texts", field="http.url",
                fix="the server must score every text it is sent (check its max batch size "
                "and top_n handling); lower http.max_batch")
        return scores

    def close(self) -> None:
        self._http.close()


def build_http_reranker(spec: RerankerModel, variant: RerankerVariantOptions,
                        model_path: Path | None) -> HttpReranker:
    http = variant.http
    assert http is not None  # config guarantees it
    return HttpReranker(http.url, style=variant.backend, model=http.model,
                        activation=spec.activation, max_length=spec.max_length or 512,
                        api_key_env=http.api_key_env, timeout_s=http.timeout_s,
                        retries=http.retries, max_batch=http.max_batch,
                        tokenizer_path=model_path)


def build(ctx: RerankerContext) -> HttpReranker:
    return build_http_reranker(ctx.spec, ctx.variant, ctx.model_path)


# Both APIs score whatever pairs they are sent; the server schedules its own batches.
TEI_SPEC, RERANK_API_SPEC = (
    BackendSpec(name, "reranker", "http", build, quantized_by="server", options_key="http",
                options_model=RerankHttpOptions, options_required=True,
                model_kinds=("cross-encoder",), devices=(), dtypes=("float32",),
                self_batching=("cross-encoder", "bi-encoder"))
    for name in ("tei", "rerank-api"))
