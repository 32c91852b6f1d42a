"""A probe of every HTTP variant before anything is encoded.

A wrong route or model used to surface as "HTTP 404, check the model name" after the
reference had spent minutes encoding. :mod:`evalq.engines.server_routes` turns a 404 into
a message listing what the server *does* answer, and :func:`probe_http_variants` runs at
the start of a run, before the reference encodes (the plan stage is meant to call it too):
for each ``openai``/``tei`` variant it checks reachability, the route, the model name
against the served models, the vector's dimensions and the server's normalization of one
probe text, and returns what it saw for the manifest.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evalq.core.errors import InputError
from evalq.core.values import EncodingSettings
from evalq.engines.context import BuildContext
from evalq.engines.factory import create_encoder
from evalq.engines.modelinfo import embedding_dim
from evalq.engines.options import EncoderVariant
from evalq.engines.registry import embedding_backend
from evalq.engines.server_routes import ServerRoutes

log = logging.getLogger(__name__)

PROBE_TEXT = "How many queries does a one percent margin need?"
_NORM_TOLERANCE = 1e-3


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


@dataclass(frozen=True)
class ProbeTarget:
    """One HTTP variant to probe, resolved by the plan: its options, where it sits in the
    recipe (``reference``, ``candidates.0``: the prefix of every field a problem names),
    its model folder and encoding settings, the cache folder, and whether the recipe's
    ``load.launch`` starts its server (then it is probed once started)."""

    variant: EncoderVariant
    where: str
    model_path: Path
    settings: EncodingSettings
    cache_dir: Path
    launched: bool = False


def _check_model(variant: EncoderVariant, encoder: Any, routes: ServerRoutes, where: str,
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


def _check_norm(variant: EncoderVariant, report: ProbeReport, where: str, file: Path) -> None:
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


def probe_variant(target: ProbeTarget, recipe_path: Path) -> ProbeReport:
    """Build the variant's HTTP encoder, embed the probe text, check what came back."""

    variant, where, settings, cache = (target.variant, target.where, target.settings,
                                       target.cache_dir)
    ctx = BuildContext(target.model_path, settings, cache / "logs", "cpu", cache)
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
    _check_width(target, report, recipe_path)
    return report


def _check_width(target: ProbeTarget, report: ProbeReport, file: Path) -> None:
    """The server's width against the model folder's, when the recipe asks for no width
    of its own (``http.dimensions`` / ``vectors.dims`` are checked by the encoder): a
    128-d server for a 384-d model was otherwise compared at the narrower width and
    failed its gates (exit 1) as if it were a worse model."""
    variant = target.variant
    if (variant.http and variant.http.dimensions) or variant.vectors.dims:
        return
    try:
        expected = embedding_dim(target.model_path)
    except (OSError, InputError):  # no readable model files: nothing to compare with
        return
    if expected is not None and expected != report.dimensions:
        raise InputError(
            message=f"variant '{variant.name}': {report.endpoint} returns "
            f"{report.dimensions}-dimensional vectors, but the model {target.model_path} "
            f"makes {expected}-dimensional ones: the server runs another model",
            file=file, field=f"{target.where}.http.model",
            fix="point http.url / http.model at the server running this model, set the "
                f"variant's model to the one served, or set http.dimensions: "
                f"{report.dimensions} if the server truncates on purpose (Matryoshka)")


def probe_one(target: ProbeTarget, recipe_path: Path) -> dict[str, Any]:
    """Probe one openai/tei variant (InputError, exit 2, if it cannot work); log one line
    (the console shows it) and return the report for the manifest."""
    report = probe_variant(target, recipe_path)
    log.info(f"[evalq] probe {target.variant.name}: POST {report.endpoint} ok, "
             f"{report.dimensions} dims, server norm {report.raw_norm:.4f}"
             + (f", model {report.served_model}" if report.served_model else ""))
    return report.as_dict()


def probe_http_variants(targets: Sequence[ProbeTarget], recipe_path: Path
                        ) -> dict[str, dict[str, Any]]:
    """Probe every openai/tei variant before any encoding; raise InputError (exit 2) on the
    first that cannot work, naming the variant, the field and the fix. Returns the reports
    by variant name for the manifest; prints one line per variant. A server the recipe
    launches itself is probed once started (the runner calls :func:`probe_one`)."""
    reports: dict[str, dict[str, Any]] = {}
    for target in targets:
        name = target.variant.name
        if not embedding_backend(target.variant.backend).http_probe:
            continue
        if target.launched:  # cannot answer before the run starts it: probed right after
            reports[name] = {"deferred": "started by load.launch; probed once up"}
            continue
        reports[name] = probe_one(target, recipe_path)
    return reports
