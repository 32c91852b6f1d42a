"""Certificates of certified candidates, and ``evalq verify`` against this machine's engines.

A verdict holds for the numerics class it was decided on (``evalq.core.host``). A
certificate carries what a deployment must reproduce to inherit it: the candidate's
identity (its recipe section, the weights fingerprint, engine versions, the numerics
class) and a probe set (a few dozen query and document texts of the run, with the
vectors the candidate gave them). ``verify`` encodes the probe set again and compares.

The tolerance comes from the run itself: a tenth of how far the candidate's vectors were
from the reference's (1 − the mean cosine the summary stored), with a floor for fp32
rounding. A deployment that moves the vectors by a tenth of what quantization moved them
is no longer what was gated. ``verify`` encodes the probe set in the certified order and
batch, so batch composition (which moves torch's dynamic int8 by percents) is not part of
the difference; the spread between encoding all texts together and one at a time is
recorded beside it. A deployment inside the tolerance matches; outside it, the checks
name what differs (the class, an engine version, the weights).

Only in-process engines (``inprocess``, ``onnx``, ``openvino``) are certified here; a
served variant is left out with a note.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core import atomicio
from evalq.core.errors import InputError
from evalq.core.host import engine_versions, host_facts
from evalq.data.manifest import load_datasets
from evalq.engines.context import BuildContext
from evalq.engines.factory import create_encoder, resolve_device
from evalq.execute.calibration_sample import corpus_calibration
from evalq.recipe.plan import build_plan
from evalq.recipe.schema import Recipe
from evalq.results.folder import RunFolder, clean_json

CERT_VERSION = 1
LOCAL_BACKENDS = ("inprocess", "onnx", "openvino")
FLOOR = 1e-5  # 1 - cosine that fp32 rounding alone may reach (float32 over ~1k dims)


@dataclass(frozen=True)
class Verification:
    """What ``verify`` found: ``matched``, the worst cosine, the tolerance, and the
    causes it can name (empty when matched)."""

    variant: str
    matched: bool
    min_cosine: float
    tolerance: float
    causes: tuple[str, ...]
    notes: tuple[str, ...]


def probe_texts(datasets: list[Any], count: int) -> list[tuple[str, str]]:
    """``(role, text)``: the first dataset's first queries and documents, half each."""
    ds = datasets[0]
    half = max(1, count // 2)
    return ([("query", t) for t in ds.queries.texts[:half]]
            + [("document", t) for t in ds.corpus.texts_for_encoding()[:half]])


@contextmanager
def _encoder(recipe: Recipe, recipe_path: Path, name: str, max_queries: int | None,
             max_docs: int | None) -> Iterator[tuple[Any, Any, list[Any], str | None]]:
    """The variant's encoder as the run built it (same calibration corpus, so a derived
    graph is the cached one on this machine), its settings, the datasets, and the
    weights fingerprint the plan resolved."""
    plan = build_plan(recipe, recipe_path, use_cache=False, only=[name])
    vp = plan.variant(name)
    variant = next(v for v in recipe.variants if v.name == name)
    datasets = load_datasets(recipe.datasets, recipe_path, max_queries, max_docs)
    ctx = BuildContext(vp.model_folder(), vp.encoding_settings(),
                       Path(recipe.cache_dir) / "logs", resolve_device(variant.device),
                       Path(recipe.cache_dir),
                       corpus_calibration(datasets, recipe.title_separator))
    encoder = create_encoder(variant, ctx)
    try:
        yield encoder, vp.encoding_settings(), datasets, vp.model_fingerprint
    finally:
        encoder.close()


def _embed(encoder: Any, settings: Any, probe: list[tuple[str, str]],
           one_by_one: bool = False) -> np.ndarray:
    texts = [(settings.query_prefix if role == "query" else settings.document_prefix) + t
             for role, t in probe]
    if one_by_one:
        return np.concatenate([encoder.embed([t]) for t in texts])
    return np.asarray(encoder.embed(texts), dtype=np.float32)


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    na = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.sum(a * b, axis=1) / np.where(na == 0, 1.0, na)


def _reference_distance(summary: dict[str, Any], name: str) -> float:
    """1 − the smallest mean cosine to the reference the run stored for ``name``
    (queries and documents, every dataset); 0 when none was stored."""
    means = [float(side["mean"]) for ds in summary["datasets"].values()
             for side in ((ds["variants"].get(name) or {}).get("vectors") or {}).values()
             if isinstance(side, dict) and side.get("mean") is not None]
    return max(0.0, 1.0 - min(means)) if means else 0.0


def certify(results: str | Path, *, probe: int = 32) -> tuple[list[Path], list[str]]:
    """Write ``certificates/<variant>.json`` for every candidate of a finished run whose
    verdict is ``pass`` and whose engine runs in-process; returns the files and notes."""
    folder = RunFolder(results)
    manifest, summary = folder.read_manifest_data(), folder.read_summary()
    recipe = Recipe.model_validate(manifest["recipe"])
    recipe_path = Path(str(manifest.get("recipe_file") or ""))
    options = manifest.get("options") or {}
    written, notes = [], []
    for name, info in summary.variants.items():
        if info.role != "candidate" or info.verdict != "pass":
            continue
        variant = next(v for v in recipe.variants if v.name == name)
        if variant.backend not in LOCAL_BACKENDS:
            notes.append(f"{name}: backend {variant.backend} is served; certificates "
                         f"cover in-process engines ({', '.join(LOCAL_BACKENDS)})")
            continue
        with _encoder(recipe, recipe_path, name, options.get("max_queries"),
                      options.get("max_docs")) as (encoder, settings, datasets, weights):
            texts = probe_texts(datasets, probe)
            together = _embed(encoder, settings, texts)
            alone = _embed(encoder, settings, texts, one_by_one=True)
            described = encoder.describe()
        spread = float(np.max(1.0 - _cosines(together, alone)))
        moved = _reference_distance(folder.read_summary_data(), name)
        cert = {"certificate_version": CERT_VERSION, "variant": name,
                "recipe_file": str(recipe_path), "recipe": manifest["recipe"],
                "options": {"max_queries": options.get("max_queries"),
                            "max_docs": options.get("max_docs")},
                "identity": {"model_fingerprint": weights, "backend": described,
                             "engines": engine_versions(), "host": host_facts().as_dict()},
                "verdict": {"verdict": info.verdict, "results": str(folder.root),
                            "numerics_class": (summary.host.numerics_class
                                               if summary.host else None)},
                "probe": {"roles": [r for r, _ in texts], "texts": [t for _, t in texts],
                          "vectors": together.tolist()},
                "tolerance": {"composition_spread": spread,
                              "candidate_vs_reference": moved,
                              "max_one_minus_cosine": max(FLOOR, 0.1 * moved)}}
        path = folder.root / "certificates" / f"{name}.json"
        atomicio.write_json(path, clean_json(cert))
        written.append(path)
    return written, notes


def read_certificate(path: str | Path) -> dict[str, Any]:
    file = Path(path)
    try:
        cert = json.loads(file.read_text(encoding="utf-8"))
        if cert["certificate_version"] != CERT_VERSION:
            raise ValueError(f"certificate_version {cert['certificate_version']}")
        missing = [k for k in ("variant", "recipe", "identity", "probe", "tolerance")
                   if k not in cert]
        if missing:
            raise KeyError(", ".join(missing))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(message=f"not an evalq certificate ({type(exc).__name__}: {exc})",
                         file=file, fix="pass a file that 'evalq certify' wrote under "
                         "RESULTS/certificates/") from None
    return dict(cert)


def verify(path: str | Path) -> Verification:
    """Encode the certificate's probe set with this machine's engine and compare."""
    cert = read_certificate(path)
    recipe = Recipe.model_validate(cert["recipe"])
    name, identity = cert["variant"], cert["identity"]
    options = (cert.get("options") or {}).get("max_queries"), \
        (cert.get("options") or {}).get("max_docs")
    probe = list(zip(cert["probe"]["roles"], cert["probe"]["texts"], strict=True))
    with _encoder(recipe, Path(cert["recipe_file"]), name, *options) as (
            encoder, settings, _, weights):
        vectors = _embed(encoder, settings, probe)
    stored = np.asarray(cert["probe"]["vectors"], dtype=np.float32)
    tolerance = float(cert["tolerance"]["max_one_minus_cosine"])
    worst = float(np.min(_cosines(vectors, stored))) if len(stored) else 1.0
    matched = stored.shape == vectors.shape and 1.0 - worst <= tolerance
    now = host_facts()
    differs = []
    if weights != identity.get("model_fingerprint"):
        differs.append(f"a different model (weights {str(weights)[:12]}, certified "
                       f"{str(identity.get('model_fingerprint'))[:12]})")
    then_class = (identity.get("host") or {}).get("numerics_class")
    if then_class != now.numerics_class:
        differs.append(f"another numerics class ({now.numerics_class}, certified on "
                       f"{then_class})")
    for engine, version in (identity.get("engines") or {}).items():
        if now.engines.get(engine) != version:
            differs.append(f"another {engine} version ({now.engines.get(engine)}, "
                           f"certified with {version})")
    causes = () if matched else tuple(differs) or (
        "the vectors differ and no recorded identity does (another build of the same "
        "engine, or a change the certificate does not record)",)
    return Verification(variant=name, matched=matched, min_cosine=worst,
                        tolerance=tolerance, causes=causes,
                        notes=tuple(differs) if matched else ())


__all__ = ["CERT_VERSION", "Verification", "certify", "probe_texts", "read_certificate",
           "verify"]
