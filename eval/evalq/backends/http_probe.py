"""HTTP endpoints as users run them: which routes a server answers, and a probe of every
HTTP variant before anything is encoded.

Servers mount the same API at different paths: Infinity serves ``/embeddings`` unless
started with ``--url-prefix /v1``; TEI answers both ``/embed`` and ``/v1/embeddings``;
vLLM ``/v1/embeddings``. A wrong route used to surface as "HTTP 404, check the model
name" after the reference had spent minutes encoding. Two things here fix that:

* :func:`not_found_error` turns a 404 into a message listing what the server *does*
  answer, read from ``/openapi.json`` (or ``/v1/openapi.json``), ``/v1/models``,
  ``/models`` and ``/info``;
* :func:`probe_http_variants` runs at the start of a run, before the reference encodes
  (the plan stage is meant to call it too): for each ``openai``/``tei`` variant it checks
  reachability, the route, the model name against the served models, the vector's
  dimensions and the server's normalization of one probe text, and returns what it saw
  for the manifest.
"""

from __future__ import annotations

import math
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from evalq.backends.registry import embedding_backend
from evalq.errors import InputError

if TYPE_CHECKING:
    from evalq.config import Recipe, Variant

PROBE_TEXT = "How many queries does a one percent margin need?"
_LISTING_TIMEOUT_S = 5.0
_NORM_TOLERANCE = 1e-3


@dataclass
class ServerRoutes:
    """What a server says about itself (each field empty when that route did not answer)."""

    operations: list[str] = field(default_factory=list)  # "POST /embeddings" (openapi.json)
    models: list[str] = field(default_factory=list)  # ids from /v1/models or /models
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
        ids = _model_ids(_get(client, listing))
        if ids:
            routes.answered.append(listing)
            routes.models = sorted(set(routes.models) | set(ids))
    info = _get(client, "/info")
    if isinstance(info, dict):
        routes.answered.append("/info")
        model = info.get("model_id") or info.get("model")
        routes.info_model = str(model) if model else None
    return routes


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


@dataclass(frozen=True)
class ProbeReport:
    """What one HTTP variant answered to the probe text (goes into the manifest)."""

    variant: str
    backend: str
    endpoint: str
    model: str | None
    served_model: str | None
    served_models: list[str]
    dimensions: int
    raw_norm: float
    normalize: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _variant_path(recipe: Recipe, variant: Variant) -> str:
    index = [v.name for v in recipe.variants].index(variant.name)
    return "reference" if index == 0 else f"candidates.{index - 1}"


def _check_model(variant: Variant, encoder: Any, routes: ServerRoutes, where: str,
                 file: Path) -> None:
    if variant.backend != "openai" or not routes.models:
        return
    if encoder.model not in routes.models:
        raise InputError(
            message=f"variant '{variant.name}' asks {encoder.url} for model "
            f"'{encoder.model}', which it does not serve (it serves "
            f"{', '.join(routes.models)})",
            file=file, field=f"{where}.http.model",
            fix=f"set http.model: {routes.models[0]}"
            + ("" if variant.http and variant.http.model else
               " (unset, evalq sends the model's local path)"),
        )


def _check_norm(variant: Variant, report: ProbeReport, where: str, file: Path) -> None:
    unit = abs(report.raw_norm - 1.0) < _NORM_TOLERANCE
    if variant.backend == "tei" and report.normalize and not unit:
        raise InputError(
            message=f"{report.endpoint} ignored normalize: true (probe vector norm "
            f"{report.raw_norm:.4f})", file=file, field=f"{where}.encoding.normalize",
            fix="check that the server is text-embeddings-inference, or use backend openai")
    if not report.normalize and unit:
        raise InputError(
            message=f"{report.endpoint} returns unit-length vectors (probe norm "
            f"{report.raw_norm:.6f}) but the recipe says normalize: false, so its vectors "
            "cannot match a reference that does not normalize",
            file=file, field=f"{where}.encoding.normalize",
            fix="set encoding.normalize: true, or start the server without normalization")


def probe_variant(recipe: Recipe, variant: Variant, recipe_path: Path) -> ProbeReport:
    """Build the variant's HTTP encoder, embed the probe text, check what came back."""
    from evalq.backends.factory import BuildContext, create_encoder
    from evalq.modelinfo import resolve_model_path, resolve_settings

    where = _variant_path(recipe, variant)
    model_path = resolve_model_path(variant.model or recipe.model.path, file=recipe_path)
    merged = recipe.encoding.merged(variant.encoding)
    settings = resolve_settings(model_path, merged.model_dump(exclude_none=True),
                                file=recipe_path)
    cache = Path(recipe.cache_dir)
    ctx = BuildContext(model_path, settings, cache / "logs", "cpu", cache)
    try:
        encoder = create_encoder(variant, ctx)
        try:
            routes = encoder.server_routes()
            _check_model(variant, encoder, routes, where, recipe_path)
            raw = (encoder.embed_raw if hasattr(encoder, "embed_raw") else encoder.embed)(
                [PROBE_TEXT])
        finally:
            encoder.close()
    except InputError as exc:
        exc.file = exc.file or recipe_path
        if exc.field and not exc.field.startswith(where):
            # TEI's /info check names encoding settings; everything else is an http option.
            group = "encoding" if exc.field in ("pooling", "max_length") else "http"
            exc.field = f"{where}.{group}.{exc.field.removeprefix('http.')}"
        raise
    vector = raw[0]
    norm = float(math.sqrt(float((vector.astype("float64") ** 2).sum())))
    report = ProbeReport(
        variant=variant.name, backend=variant.backend, endpoint=f"{encoder.url}{encoder.route}",
        model=getattr(encoder, "model", None), served_model=getattr(encoder, "served_model",
                                                                    routes.info_model),
        served_models=routes.models, dimensions=int(vector.shape[0]), raw_norm=norm,
        normalize=settings.normalize)
    _check_norm(variant, report, where, recipe_path)
    return report


def launched_by_recipe(recipe: Recipe, variant: Variant) -> bool:
    """Whether the recipe's ``load.launch`` starts this variant's server: it cannot answer
    before the run starts it, so it is probed right after (:func:`probe_one`)."""
    section = getattr(recipe, "load", None)
    return section is not None and variant.name in section.launch


def probe_one(recipe: Recipe, variant: Variant, recipe_path: Path) -> dict[str, Any]:
    """Probe one openai/tei variant (InputError, exit 2, if it cannot work); print one line
    and return the report for the manifest."""
    report = probe_variant(recipe, variant, recipe_path)
    print(f"[evalq] probe {variant.name}: POST {report.endpoint} ok, "
          f"{report.dimensions} dims, server norm {report.raw_norm:.4f}"
          + (f", model {report.served_model}" if report.served_model else ""),
          file=sys.stderr, flush=True)
    return report.as_dict()


def probe_http_variants(recipe: Recipe, variants: list[Variant], recipe_path: Path
                        ) -> dict[str, dict[str, Any]]:
    """Probe every openai/tei variant before any encoding; raise InputError (exit 2) on the
    first that cannot work, naming the variant, the field and the fix. Returns the reports
    by variant name for the manifest; prints one line per variant. A server the recipe
    launches itself is probed once started (the runner calls :func:`probe_one`)."""
    reports: dict[str, dict[str, Any]] = {}
    for variant in variants:
        if not embedding_backend(variant.backend).http_probe:
            continue
        if launched_by_recipe(recipe, variant):
            reports[variant.name] = {"deferred": "started by load.launch; probed once up"}
            continue
        reports[variant.name] = probe_one(recipe, variant, recipe_path)
    return reports
