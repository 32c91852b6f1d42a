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
served variant is left out with a note. A certificate is verified against a served
endpoint too (``url``): its raw replies are compared, normalization included.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core import atomicio
from evalq.core.errors import InputError
from evalq.core.host import current_class, engine_versions, host_facts
from evalq.data.manifest import load_datasets
from evalq.encode.parity import pick_parity_texts
from evalq.engines.context import BuildContext
from evalq.engines.factory import create_encoder, resolve_device
from evalq.engines.options import EncoderVariant, HttpOptions
from evalq.engines.server_routes import own_truncation_fields
from evalq.engines.tokenizer_identity import TokenizerIdentity, folder_digest
from evalq.engines.tokenizer_identity import resolve as resolve_tokenizer
from evalq.execute.calibration_sample import corpus_calibration
from evalq.execute.verify_causes import compare, cosines
from evalq.plan.types import Plan
from evalq.plan.variant import SearchedVariant
from evalq.results.folder import RunFolder, clean_json

CERT_VERSION = 1
LOCAL_BACKENDS = ("inprocess", "onnx", "openvino")
# 1 - cosine that fp32 arithmetic of another engine (a served endpoint, another kernel
# order) stays within: float32 rounding over a model's layers, two decades above a
# single dot product's, and two decades below what truncation or pooling moves.
FLOOR = 1e-4
_FLOAT32_MAX = float(np.finfo(np.float32).max)


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
    """``(role, text)``: half queries, half documents of the first dataset; the documents
    are the parity pick (the longest, where truncation shows, and an even sample)."""
    ds = datasets[0]
    half = max(1, count // 2)
    return ([("query", t) for t in ds.queries.texts[:half]]
            + [("document", t) for t in pick_parity_texts(ds.corpus.texts_for_encoding(),
                                                           half)])


@contextmanager
def _encoder(plan: Plan, name: str, max_queries: int | None,
             max_docs: int | None, *, served: EncoderVariant | None = None,
             tokenizer: TokenizerIdentity | None = None,
             known_draws: Mapping[tuple[int, int], str] | None = None,
             ) -> Iterator[tuple[Any, Any, Callable[[], list[Any]], str | None]]:
    """The variant's encoder as the run built it (same calibration corpus, so a derived
    graph is the cached one on this machine), or the client of ``served`` with the same
    settings; its settings, the datasets (read when first asked: verifying a candidate
    that calibrates nothing reads none), and the weights fingerprint the plan resolved.
    ``tokenizer``: what the certificate says AutoTokenizer resolved
    (``engines.tokenizer_identity``); ``known_draws``: its calibrated graph's draw
    (:func:`_certified_draws`)."""
    vp = plan.variant(name)
    variant = vp.options

    @functools.cache
    def datasets() -> list[Any]:
        return load_datasets(list(plan.dataset_specs), plan.recipe_file, max_queries,
                             max_docs)

    def calibration(count: int, seed: int) -> list[tuple[str, str]]:
        return corpus_calibration(datasets(), plan.title_separator)(count, seed)

    ctx = BuildContext(vp.model_folder(), vp.encoding_settings(), plan.work_dir / "logs",
                       resolve_device(variant.device), plan.work_dir, calibration,
                       tokenizer=tokenizer, known_draws=known_draws or {})
    encoder = create_encoder(served or variant, ctx)
    try:
        yield encoder, vp.encoding_settings(), datasets, vp.model_fingerprint
    finally:
        encoder.close()


def _certified_draws(identity: Mapping[str, Any]) -> dict[tuple[int, int], str]:
    """``(count, seed)`` -> the digest of the documents the certified graph was calibrated
    on, from the certificate's record of its backend (none where nothing was calibrated,
    or where the record is not what a run writes: verify then draws as a run does)."""
    backend = identity.get("backend")
    info = backend.get("graph_info") if isinstance(backend, dict) else None
    params = info.get("params") if isinstance(info, dict) else None
    if not isinstance(params, dict):
        return {}
    count, seed = params.get("calibration_texts"), params.get("seed")
    drawn = params.get("calibration_ids")
    if type(count) is int and type(seed) is int and isinstance(drawn, str):
        return {(count, seed): drawn}
    return {}


def _prefixed(settings: Any, probe: list[tuple[str, str]]) -> list[str]:
    return [(settings.query_prefix if role == "query" else settings.document_prefix) + t
            for role, t in probe]


def _embed(encoder: Any, settings: Any, probe: list[tuple[str, str]],
           one_by_one: bool = False) -> np.ndarray:
    """The probe's vectors, as the engine returns them (an HTTP client's raw reply: a
    server that does not normalize must show it)."""
    texts = _prefixed(settings, probe)
    raw = getattr(encoder, "embed_raw", None)
    if raw is not None:
        return np.asarray(raw(texts), dtype=np.float32)
    if one_by_one:
        return np.concatenate([encoder.embed([t]) for t in texts])
    return np.asarray(encoder.embed(texts), dtype=np.float32)


def _reference_distance(summary: dict[str, Any], name: str) -> float:
    """1 − the smallest mean cosine to the reference the run stored for ``name``
    (queries and documents, every dataset); 0 when none was stored."""
    means = [float(side["mean"]) for ds in summary["datasets"].values()
             for side in ((ds["variants"].get(name) or {}).get("vectors") or {}).values()
             if isinstance(side, dict) and side.get("mean") is not None]
    return max(0.0, 1.0 - min(means)) if means else 0.0


def _short_probe(name: str, texts: list[tuple[str, str]], probe: int) -> list[str]:
    """A note where the first dataset has fewer queries or distinct documents than
    ``--probe`` asks of each: the probe took what there was, and said nothing."""
    queries = sum(role == "query" for role, _ in texts)
    documents, asked = len(texts) - queries, max(1, probe // 2)
    if queries >= asked and documents >= asked:
        return []
    return [f"{name}: the probe holds {queries} queries and {documents} documents, "
            f"fewer than the {asked} of each --probe {probe} asks: the run's first "
            "dataset has no more"]


# A plan for one variant of the stored recipe (the app builds it: evalq.recipe.plan).
PlanFor = Callable[[str], Plan]


def _check_class(decided: str | None, folder: RunFolder) -> str | None:
    """Refuse to certify on another numerics class than the verdicts were decided on: the
    probe's vectors are encoded here and the certificate names this machine's class, so a
    folder copied to another CPU (or certified under an ISA cap the run lacked) gave a
    certificate of a class no gate decided, which verify on that class then matched
    without a word. A note where the folder recorded no host (older folders)."""
    here = current_class()
    if decided is None:
        return (f"{folder.root} records no host: its verdicts may have been decided on "
                f"another numerics class than this machine's ({here}), which the "
                "certificates name")
    if decided != here:
        raise InputError(
            message=f"the verdicts were decided on numerics class {decided} and this "
            f"machine is of class {here}: a certificate's probe is encoded here, so it "
            f"would certify {here}, where no gate was decided",
            file=folder.root / "summary.json", field="host.numerics_class",
            fix=f"run 'evalq certify' on a machine of class {decided}, with the ISA caps "
            "the run had (ONEDNN_MAX_CPU_ISA, ATEN_CPU_CAPABILITY) and no others, or run "
            "the recipe on this machine and certify that folder")
    return None


def certify(results: str | Path, variants: Mapping[str, SearchedVariant], plan_for: PlanFor,
            *, probe: int = 32) -> tuple[list[Path], list[str]]:
    """Write ``certificates/<variant>.json`` for every candidate of a finished run whose
    verdict is ``pass`` and whose engine runs in-process; returns the files and notes.
    ``variants`` are the stored recipe's by name, ``plan_for`` plans one of them (the app
    reads the stored recipe; this takes no recipe)."""
    folder = RunFolder(results)
    manifest, summary = folder.read_manifest_data(), folder.read_summary()
    # absolute: 'evalq run recipe.yaml' stores the name as given, and verify from another
    # working folder resolved the recipe's relative dataset paths there
    stored = manifest.get("recipe_file")
    recipe_path = Path(str(stored)).absolute() if stored else Path("")
    options = manifest.get("options") or {}
    written: list[Path] = []
    passed = [i for i in summary.variants.values() if i.role == "candidate"
              and i.verdict == "pass"]
    note = None if not passed else _check_class(
        summary.host.numerics_class if summary.host else None, folder)
    notes = [] if note is None else [note]
    for name, info in summary.variants.items():
        if info.role != "candidate" or info.verdict != "pass":
            continue
        variant = variants.get(name)
        if variant is None:  # a KeyError, exit 3, before
            raise InputError(
                message=f"the summary's candidate '{name}' passed, and the recipe the "
                f"manifest stores has no variant of that name (its variants: "
                f"{', '.join(variants)})", file=folder.root / "manifest.json",
                field="recipe", fix="certify a folder as 'evalq run' wrote it (its "
                "manifest and summary come from one run), or run the recipe again")
        if variant.backend not in LOCAL_BACKENDS:
            notes.append(f"{name}: backend {variant.backend} is served; certificates "
                         f"cover in-process engines ({', '.join(LOCAL_BACKENDS)})")
            continue
        plan = plan_for(name)
        with _encoder(plan, name, options.get("max_queries"),
                      options.get("max_docs")) as (encoder, settings, datasets, weights):
            texts = probe_texts(datasets(), probe)
            notes.extend(_short_probe(name, texts, probe))
            together = _embed(encoder, settings, texts)
            tokens = encoder.token_lengths(_prefixed(settings, texts))
            alone = _embed(encoder, settings, texts, one_by_one=True)
            described = encoder.describe()
        tokenizer = resolve_tokenizer(plan.variant(name).model_folder())
        spread = float(np.max(1.0 - cosines(together, alone)))
        moved = _reference_distance(folder.read_summary_data(), name)
        cert = {"certificate_version": CERT_VERSION, "variant": name,
                "recipe_file": str(recipe_path), "recipe": manifest["recipe"],
                "options": {"max_queries": options.get("max_queries"),
                            "max_docs": options.get("max_docs")},
                "identity": {"model_fingerprint": weights, "backend": described,
                             "engines": engine_versions(), "host": host_facts().as_dict(),
                             "tokenizer": tokenizer.as_dict()},
                "verdict": {"verdict": info.verdict, "results": str(folder.root.absolute()),
                            "numerics_class": (summary.host.numerics_class
                                               if summary.host else None)},
                "settings": settings.as_dict(),
                "probe": {"roles": [r for r, _ in texts], "texts": [t for _, t in texts],
                          "tokens": list(tokens), "vectors": together.tolist()},
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
        version = cert["certificate_version"]
        if version != CERT_VERSION or isinstance(version, bool):
            raise ValueError(f"certificate_version {cert['certificate_version']}")
        missing = [k for k in ("variant", "recipe", "identity", "probe", "tolerance")
                   if k not in cert]
        if missing:
            raise KeyError(", ".join(missing))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(message=f"not an evalq certificate ({type(exc).__name__}: {exc})",
                         file=file, fix="pass a file that 'evalq certify' wrote under "
                         "RESULTS/certificates/") from None
    problem = _parts_problem(cert)
    if problem is not None:
        raise InputError(message=f"not an evalq certificate ({problem})", file=file,
                         fix="pass a file that 'evalq certify' wrote under "
                         "RESULTS/certificates/, as it wrote it")
    return dict(cert)


def _parts_problem(cert: dict[str, Any]) -> str | None:
    """What is wrong with the parts verify reads, as certify writes them (None: nothing):
    a hand-edited probe of unequal lengths, text vectors or a NaN tolerance ended in exit
    3, or verified anything (no comparison with NaN is a mismatch); so did an identity,
    options or settings part of another type (a list where certify writes a mapping).
    Checked by type, not by catching what reading them would raise, so a bug here still
    surfaces as one."""
    if not isinstance(cert["variant"], str) or not isinstance(cert["recipe"], dict):
        return "variant must be a name and recipe a mapping"
    problem = _probe_problem(cert["probe"]) or _context_problem(cert)
    if problem is not None:
        return problem
    bound = cert["tolerance"]
    tolerance = bound.get("max_one_minus_cosine") if isinstance(bound, dict) else None
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) \
            or not 0 <= tolerance < 1:
        return f"tolerance.max_one_minus_cosine {tolerance!r} is not a number in [0, 1)"
    return None


def _float32(value: Any) -> bool:
    """A JSON number a float32 holds finitely (NaN, infinities, booleans and integers past
    float32, which numpy cannot even convert when past float64, are not)."""
    return not isinstance(value, bool) and isinstance(value, int | float) \
        and abs(value) <= _FLOAT32_MAX


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _probe_problem(probe: Any) -> str | None:
    if not isinstance(probe, dict):
        return "probe must be a mapping"
    roles, texts = probe.get("roles"), probe.get("texts")
    if not isinstance(roles, list) or not isinstance(texts, list) or not roles \
            or len(roles) != len(texts) or any(r not in ("query", "document") for r in roles) \
            or any(not isinstance(t, str) for t in texts):
        return ("probe.roles and probe.texts must be lists of one length, of 'query' / "
                "'document' and of texts")
    rows = probe.get("vectors")
    if not isinstance(rows, list) or len(rows) != len(texts) or any(
            not isinstance(row, list) or not row or not all(_float32(x) for x in row)
            for row in rows) or len({len(row) for row in rows}) != 1:
        return ("probe.vectors must be one vector of finite float32 numbers per probe "
                "text, all of one width")
    tokens = probe.get("tokens")
    if tokens is not None and (not isinstance(tokens, list) or len(tokens) != len(texts)
                               or not all(_count(n) for n in tokens)):
        return "probe.tokens must hold one whole number of tokens per probe text"
    return None


def _context_problem(cert: dict[str, Any]) -> str | None:
    """The identity, options and settings verify reads (``_identity_differences``, the
    datasets' slice, the causes' settings)."""
    identity = cert["identity"]
    if not isinstance(identity, dict):
        return "identity must be a mapping"
    for part in ("host", "engines"):
        if not isinstance(identity.get(part) or {}, dict):
            return f"identity.{part} must be a mapping"
    options = cert.get("options") or {}
    if not isinstance(options, dict):
        return "options must be a mapping"
    for limit in ("max_queries", "max_docs"):
        value = options.get(limit)
        if value is not None and (not _count(value) or value == 0):
            return f"options.{limit} {value!r} is neither null nor a whole number >= 1"
    if not isinstance(cert.get("settings") or {}, dict):
        return "settings must be a mapping"
    return None


def _identity_differences(identity: dict[str, Any], weights: str | None,
                          url: str | None, model_folder: Path,
                          known: TokenizerIdentity | None) -> list[str]:
    """What the certificate's identity tells apart here: weights, class, versions, the
    model folder's tokenizer and config files (for a served endpoint only the weights
    evalq resolved locally are comparable: the server's host, engines and tokenizer are
    not visible)."""
    differs = []
    if weights != identity.get("model_fingerprint"):
        differs.append(f"a different model (weights {str(weights)[:12]}, certified "
                       f"{str(identity.get('model_fingerprint'))[:12]})")
    if url is not None:
        return differs
    now = host_facts()
    then_class = (identity.get("host") or {}).get("numerics_class")
    if then_class != now.numerics_class:
        differs.append(f"another numerics class ({now.numerics_class}, certified on "
                       f"{then_class})")
    for engine, version in (identity.get("engines") or {}).items():
        if now.engines.get(engine) != version:
            differs.append(f"another {engine} version ({now.engines.get(engine)}, "
                           f"certified with {version})")
    # a folder whose tokenizer was edited moved every vector, and the causes named only
    # 'another pooling, dtype, numerics class or model', though the digest told it
    files = None if known is None else folder_digest(model_folder)
    if known is not None and files != known.files:
        differs.append(f"other non-weight files (tokenizer, configuration) in "
                       f"{model_folder}: digest {str(files)[:12]}, certified "
                       f"{known.files[:12]}")
    return differs


def verify(cert: Mapping[str, Any], plan: Plan, *, url: str | None = None,
           model: str | None = None) -> Verification:
    """Encode the certificate's probe set (``cert``: :func:`read_certificate`) with this
    machine's engine, or with the OpenAI-compatible endpoint at ``url`` (serving ``model``;
    default: the certified model's path, as a recipe without ``http.model`` sends), and
    compare. A vLLM endpoint is asked to truncate at its own limit (it refuses longer
    texts otherwise); no other field is sent, so what it serves is its own defaults.
    ``plan``: the certified variant's, from the recipe the certificate stores
    (the app builds it)."""
    name, identity, probe_part = cert["variant"], cert["identity"], cert["probe"]
    options = cert.get("options") or {}
    probe = list(zip(probe_part["roles"], probe_part["texts"], strict=True))
    served = None if url is None else EncoderVariant(
        name=f"{name}-served", backend="openai",
        http=HttpOptions(url=url, model=model) if model else HttpOptions(url=url))
    known = TokenizerIdentity.from_dict(identity.get("tokenizer"))
    with _encoder(plan, name, options.get("max_queries"), options.get("max_docs"),
                  served=served, tokenizer=known,
                  known_draws=_certified_draws(identity)) as (encoder, settings, _, weights):
        if url is not None:  # what the deployment does by itself, long texts included
            encoder.extra_fields.update(own_truncation_fields(url))
        vectors = _embed(encoder, settings, probe)
    stored = np.asarray(probe_part["vectors"], dtype=np.float32)
    tolerance = float(cert["tolerance"]["max_one_minus_cosine"])
    found = compare(vectors, stored, probe_part["roles"],
                    probe_part.get("tokens") or [0] * len(probe),
                    cert.get("settings") or settings.as_dict(), tolerance)
    differs = _identity_differences(identity, weights, url,
                                    plan.variant(name).model_folder(), known)
    return Verification(variant=name, matched=found.matched, min_cosine=found.min_cosine,
                        tolerance=tolerance,
                        causes=() if found.matched else (*found.causes, *differs),
                        notes=tuple(differs) if found.matched else ())


__all__ = ["CERT_VERSION", "Verification", "certify", "probe_texts", "read_certificate",
           "verify"]
