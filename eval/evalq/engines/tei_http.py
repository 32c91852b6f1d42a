"""Client for text-embeddings-inference's native ``POST /embed`` route.

TEI fixes pooling and the maximum input length when the server starts and reports them on
``/info``; normalization, truncation and its direction are per request. So this client
reads ``/info`` first, refuses a server whose pooling or maximum length differs from the
recipe's settings (the classic source of silent engine disagreement), sends ``normalize``,
``truncate`` and ``truncation_direction`` explicitly with every request, and batches within
the server's ``max_client_batch_size``. ``/info`` goes into the manifest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Unpack

import numpy as np

from evalq.core.errors import InputError
from evalq.core.protocols import Encoder
from evalq.engines.context import BuildContext
from evalq.engines.openai_http import HttpClientArgs, HttpEncoderBase
from evalq.engines.options import EncoderVariant, HttpOptions
from evalq.engines.replies import parse_tei_reply
from evalq.engines.spec import REMOTE_SERVER, BackendSpec

BACKEND_NAME = "tei"

_TEI_DIRECTION = {"right": "Right", "left": "Left"}


def tei_pooling(info: dict[str, Any]) -> str | None:
    """The pooling a TEI server was started with, lower-cased (``mean``, ``cls``, ...)."""
    model_type = info.get("model_type")
    if isinstance(model_type, dict):
        embedding = model_type.get("embedding")
        if isinstance(embedding, dict) and isinstance(embedding.get("pooling"), str):
            return embedding["pooling"].lower()
    return None


class TeiEncoder(HttpEncoderBase):
    """Encoder over TEI's ``/embed``; reads and checks ``/info`` in the constructor."""

    backend = BACKEND_NAME

    def __init__(
        self,
        url: str,
        *,
        max_batch: int | None = None,
        prompt_name: str | None = None,
        route: str | None = None,
        **common: Unpack[HttpClientArgs],
    ) -> None:
        """``max_batch`` defaults to (and is capped by) the server's max_client_batch_size;
        ``route`` is the native embed path (default ``/embed``)."""
        super().__init__(url, route or "/embed", **common)
        self.prompt_name = prompt_name
        info = self._http.get_json("/info")
        if not isinstance(info, dict):
            raise InputError(
                message=f"{self.url}/info did not return a JSON object",
                field="url",
                fix="point the recipe at a text-embeddings-inference server",
            )
        self.info: dict[str, Any] = info
        self._check_info(info)
        batch = info.get("max_client_batch_size")
        server_batch = batch if isinstance(batch, int) and not isinstance(batch, bool) \
            and batch >= 1 else 32
        self.max_batch = min(max_batch, server_batch) if max_batch else server_batch

    def _check_info(self, info: dict[str, Any]) -> None:
        pooling = tei_pooling(info)
        if pooling is not None and pooling != self.settings.pooling:
            raise InputError(
                message=f"the TEI server at {self.url} pools with '{pooling}' but the recipe "
                f"asks for '{self.settings.pooling}'",
                field="pooling",
                fix=f"set pooling: {pooling} in the recipe, or restart TEI with "
                f"--pooling {self.settings.pooling}",
            )
        max_input = info.get("max_input_length")
        if isinstance(max_input, int) and max_input != self.settings.max_length:
            raise InputError(
                message=f"the TEI server at {self.url} truncates at {max_input} tokens but "
                f"the recipe's max_length is {self.settings.max_length}",
                field="max_length",
                fix=f"set max_length: {max_input} in the recipe (TEI fixes it at start-up)",
            )

    def fingerprint(self) -> str:
        self._identify(f"tei|{self.url}", lambda: self.info)
        return self._key({"model_id": self.info.get("model_id"),
                          "model_sha": self.info.get("model_sha"),
                          "model_dtype": self.info.get("model_dtype"),
                          "prompt_name": self.prompt_name})

    def describe(self) -> dict[str, Any]:
        return self._described({"model": self.info.get("model_id"), "info": self.info,
                                "request_fields": self._fields()})

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return self._embed_batched(texts)

    def _fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "normalize": self.settings.normalize,
            "truncate": True,
            "truncation_direction": _TEI_DIRECTION[self.settings.truncation_side],
        }
        if self.prompt_name is not None:
            fields["prompt_name"] = self.prompt_name
        return fields

    def _embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        body = self._http.post_json(self.route, {"inputs": list(texts), **self._fields()})
        return parse_tei_reply(body, len(texts), f"{self.url}{self.route}")


def build(variant: EncoderVariant, ctx: BuildContext) -> Encoder:
    http = variant.http
    assert http is not None  # the recipe requires it
    return TeiEncoder(http.url, settings=ctx.settings, api_key_env=http.api_key_env,
                      timeout_s=http.timeout_s, retries=http.retries,
                      concurrency=http.concurrency, prompt_name=http.prompt_name,
                      tokenizer_path=ctx.model_path, route=http.route,
                      probe_store=ctx.cache_dir / "servers")


SPEC = BackendSpec(BACKEND_NAME, "embedding", "http", build, quantized_by="server",
                   options_key="http", options_model=HttpOptions, options_required=True,
                   devices=(), dtypes=("float32",), self_batching=("embedding",),
                   batch_dependence=lambda variant: REMOTE_SERVER, ray=True,
                   load_api="tei", http_probe=True)
