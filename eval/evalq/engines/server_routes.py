"""What an HTTP server says it answers: its routes and models, and the 404 message built
from them.

Servers mount the same API at different paths: Infinity serves ``/embeddings`` unless
started with ``--url-prefix /v1``; TEI answers both ``/embed`` and ``/v1/embeddings``;
vLLM ``/v1/embeddings``. :func:`not_found_error` turns a 404 into a message listing what
the server *does* answer, read from ``/openapi.json`` (or ``/v1/openapi.json``),
``/v1/models``, ``/models`` and ``/info``. The HTTP client calls it on a 404, and the
run's probe (:mod:`evalq.engines.http_probe`) reads the same listing; this module knows
nothing of recipes, so the lowest HTTP layer can use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import httpx

from evalq.core.errors import InputError

_LISTING_TIMEOUT_S = 5.0


@dataclass
class ServerRoutes:
    """What a server says about itself (each field empty when that route did not answer)."""

    operations: list[str] = field(default_factory=list)  # "POST /embeddings" (openapi.json)
    models: list[str] = field(default_factory=list)  # ids from /v1/models or /models
    owners: list[str] = field(default_factory=list)  # their owned_by ("vllm" for vLLM)
    info_model: str | None = None  # TEI / Infinity /info model id
    answered: list[str] = field(default_factory=list)  # listing routes that answered 200

    def describe(self) -> str:
        parts = []
        if self.operations:
            parts.append("routes " + ", ".join(self.operations))
        if self.models:
            parts.append("models " + ", ".join(self.models))
        if self.info_model:
            parts.append(f"/info model {self.info_model}")
        if not parts:
            return ("none of /openapi.json, /v1/models, /models, /info answered, so its "
                    "routes are unknown")
        return "; ".join(parts)


def _get(client: httpx.Client, path: str) -> Any:
    try:
        response = client.get(path, timeout=_LISTING_TIMEOUT_S)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    try:
        return response.json()
    except ValueError:
        return None


def _model_ids(body: Any) -> list[str]:
    data = body.get("data") if isinstance(body, dict) else body
    if not isinstance(data, list):
        return []
    return [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]


def _owners(body: Any) -> list[str]:
    data = body.get("data") if isinstance(body, dict) else body
    if not isinstance(data, list):
        return []
    return [str(m["owned_by"]) for m in data if isinstance(m, dict) and m.get("owned_by")]


def server_routes(client: httpx.Client) -> ServerRoutes:
    """Read the routes and models a server answers (best effort, short timeouts)."""
    routes = ServerRoutes()
    for listing in ("/openapi.json", "/v1/openapi.json"):  # Infinity mounts it under its prefix
        spec = _get(client, listing)
        if not (isinstance(spec, dict) and isinstance(spec.get("paths"), dict)):
            continue
        routes.answered.append(listing)
        for path, methods in sorted(spec["paths"].items()):
            # The POST routes (embeddings, rerank, ...) are what a user is looking for.
            if isinstance(methods, dict) and "post" in {m.lower() for m in methods}:
                routes.operations.append(f"POST {path}")
        break
    for listing in ("/v1/models", "/models"):
        body = _get(client, listing)
        ids = _model_ids(body)
        if ids:
            routes.answered.append(listing)
            routes.models = sorted(set(routes.models) | set(ids))
            routes.owners = sorted(set(routes.owners) | set(_owners(body)))
    info = _get(client, "/info")
    if isinstance(info, dict):
        routes.answered.append("/info")
        model = info.get("model_id") or info.get("model")
        routes.info_model = str(model) if model else None
    return routes


def own_truncation_fields(url: str) -> dict[str, Any]:
    """Request fields that let a client see how a server truncates by itself.

    vLLM refuses an input longer than its ``--max-model-len`` unless the request asks it
    to truncate; ``truncate_prompt_tokens: -1`` asks it to truncate at that limit, which
    is what a deployment that truncates does. Other servers truncate (or refuse) without
    being asked and may refuse fields they do not know, so they get none."""
    root = url.rstrip("/").removesuffix("/v1")
    with httpx.Client(base_url=root) as client:
        routes = server_routes(client)
    return {"truncate_prompt_tokens": -1} if "vllm" in routes.owners else {}


def _embedding_routes(routes: ServerRoutes) -> list[str]:
    return [op.split(" ", 1)[1] for op in routes.operations
            if op.startswith("POST ") and op.rstrip("/").endswith(("/embeddings", "/embed"))]


def not_found_error(client: httpx.Client, url: str, path: str, excerpt: str) -> InputError:
    """The error for a 404: the route is missing, or (when it exists) the model is."""
    routes = server_routes(client)
    post_paths = [op.split(" ", 1)[1] for op in routes.operations if op.startswith("POST ")]
    if path in post_paths:
        return InputError(
            message=f"{url} exists but answered 404 ({excerpt}): the server does not know "
            f"the model asked for. It serves: {routes.describe()}",
            field="http.model",
            fix="set http.model to one of the served models",
        )
    suggestions = _embedding_routes(routes)
    hint = f"set http.route to {' or '.join(suggestions)}" if suggestions else (
        "set http.route to the server's embeddings path (Infinity: /embeddings, or "
        "/v1/embeddings when started with --url-prefix /v1; TEI: /embed or /v1/embeddings; "
        "vLLM: /v1/embeddings)")
    return InputError(
        message=f"{url} answered 404 Not Found: the server has no route {path}. "
        f"It answers: {routes.describe()}",
        field="http.route",
        fix=hint,
    )
