"""`evalq run`: one recipe, end to end, in one direction.

recipe -> datasets -> for each variant (reference first): build the backend, parity
preflight, encode (cached), search, score against qrels and against the reference ->
statistics and gates (``scoring``) -> results folder (``results``) -> console table.

Variants run one at a time and their engines are closed before the next one starts, so
two engines never compete for memory. Only the reference's vectors and rankings are kept
in memory; a candidate's are reduced to per-query values as soon as they exist.
"""

from __future__ import annotations

import resource
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evalq.backends.base import Encoder, EncodingSettings
from evalq.config import Recipe, Variant, load_recipe
from evalq.errors import BackendUnavailableError, InputError
from evalq.metrics.values import PerQuery
from evalq.ranking import Ranking
from evalq.results import RunFolder, environment, git_revision, now_iso, package_versions


@dataclass
class ReferenceState:
    """What candidates are compared against, per dataset."""

    ranking: Ranking
    query_vectors: np.ndarray
    doc_vectors: np.ndarray


@dataclass
class VariantRecord:
    """Everything the summary needs about one variant, after its engine is closed."""

    name: str
    role: str
    description: dict[str, Any]
    settings: EncodingSettings
    timings: dict[str, Any] = field(default_factory=dict)
    datasets: dict[str, dict[str, Any]] = field(default_factory=dict)
    parity: dict[str, Any] | None = None


@dataclass(frozen=True)
class RunOutcome:
    passed: bool
    output: Path
    summary: dict[str, Any]


def _peak_rss_mb(who: int = resource.RUSAGE_SELF) -> float:
    """Peak resident memory so far, MiB (ru_maxrss is KiB on Linux and monotonic).

    ``RUSAGE_CHILDREN`` covers engine and server processes once they have exited: the
    largest of them, which is where a vLLM variant's memory lives.
    """
    return resource.getrusage(who).ru_maxrss / 1024


def _required_depth(recipe: Recipe) -> int:
    from evalq.metrics.registry import parse_measure

    texts = [*recipe.metrics, *recipe.reference_metrics, *(g.metric for g in recipe.gates)]
    cutoffs = [parse_measure(t).cutoff or 0 for t in texts]
    return max([10, *cutoffs])


def _select_variants(recipe: Recipe, only: list[str] | None, file: Path) -> list[Variant]:
    if not only:
        return recipe.variants
    names = {v.name for v in recipe.variants}
    unknown = sorted(set(only) - names)
    if unknown:
        raise InputError(message=f"--only names unknown variant(s) {', '.join(unknown)}",
                         file=file, field="--only",
                         fix=f"choose from {', '.join(sorted(names))}")
    return [recipe.reference] + [c for c in recipe.candidates if c.name in only]


def _search_dirs(recipe_path: Path) -> list[Path]:
    here = recipe_path.resolve().parent
    return [Path.cwd() / "datasets", here / "datasets", here.parent / "datasets"]


def _settings_for(
    recipe: Recipe, variant: Variant, model_path: Path, file: Path
) -> EncodingSettings:
    from evalq.modelinfo import resolve_settings

    merged = recipe.encoding.merged(variant.encoding)
    return resolve_settings(model_path, merged.model_dump(exclude_none=True), file=file)


def _variant_model_path(recipe: Recipe, variant: Variant, file: Path) -> Path:
    from evalq.modelinfo import resolve_model_path

    return resolve_model_path(variant.model or recipe.model.path, file=file)


def _check_capabilities(variants: list[Variant], file: Path) -> None:
    """Refuse impossible combinations (fp8 on CPU, bitsandbytes in vLLM on CPU, ...)
    before anything loads."""
    from evalq.backends.capability import check_current_device

    for v in variants:
        quantization = v.vllm.quantization if v.vllm else None
        try:
            check_current_device(v.backend, quantization, v.dtype)
        except InputError as exc:
            exc.file = file
            exc.field = f"variant '{v.name}'.{exc.field or 'backend'}"
            raise


def run_recipe_file(path: str | Path, **kwargs: Any) -> RunOutcome:
    path = Path(path)
    return run_recipe(load_recipe(path), path, **kwargs)


def run_recipe(
    recipe: Recipe,
    recipe_path: Path,
    *,
    output: Path | None = None,
    max_queries: int | None = None,
    max_docs: int | None = None,
    only: list[str] | None = None,
    use_cache: bool = True,
    progress: bool | None = None,
) -> RunOutcome:
    from evalq.embcache import EmbeddingCache
    from evalq.metrics.judged import JudgedIndex
    from evalq.modelinfo import model_fingerprint
    from evalq.report.console import print_run_table
    from evalq.scoring import build_summary

    started = now_iso()
    show_progress = sys.stderr.isatty() if progress is None else progress
    variants = _select_variants(recipe, only, recipe_path)
    _check_capabilities(variants, recipe_path)
    max_queries = max_queries or recipe.max_queries
    max_docs = max_docs or recipe.max_docs
    datasets = _load_datasets(recipe, recipe_path, max_queries, max_docs)
    depth = _required_depth(recipe)
    out_dir = Path(output or recipe.output or Path("results") / recipe.name)
    folder = RunFolder(out_dir)
    folder.prepare()
    cache = EmbeddingCache(Path(recipe.cache_dir) / "embeddings") if use_cache else None
    model_paths = {v.name: _variant_model_path(recipe, v, recipe_path) for v in variants}
    manifest: dict[str, Any] = {
        "evalq_version": package_versions()["evalq"],
        "git_revision": git_revision(),
        "versions": package_versions(),
        "environment": environment(),
        "recipe_file": str(recipe_path),
        "recipe": recipe.model_dump(mode="json"),
        "options": {"max_queries": max_queries, "max_docs": max_docs, "only": only,
                    "use_cache": use_cache, "depth": depth},
        "model": {"path": str(model_paths[recipe.reference.name]),
                  "fingerprint": model_fingerprint(model_paths[recipe.reference.name])},
        "datasets": {d.name: {"fingerprint": d.fingerprint, "queries": len(d.queries),
                              "documents": len(d.corpus), "source": dict(d.source)}
                     for d in datasets},
        "started": started,
        "status": "running",
    }
    folder.write_manifest(manifest)

    reference: dict[str, ReferenceState] = {}
    judged = {d.name: JudgedIndex.build(d.qrels, d.corpus.ids) for d in datasets}
    records: list[VariantRecord] = []
    parity_texts = _parity_texts(datasets, recipe.parity.texts)
    parity_ref: tuple[np.ndarray, EncodingSettings] | None = None
    try:
        for variant in variants:
            role = "reference" if variant is recipe.reference else "candidate"
            settings = _settings_for(recipe, variant, model_paths[variant.name], recipe_path)
            record, parity_vectors = _run_variant(
                recipe, variant, role, settings, model_paths[variant.name], datasets, depth,
                folder, cache, reference, judged, parity_texts, parity_ref, show_progress,
            )
            if role == "reference" and parity_vectors is not None:
                parity_ref = (parity_vectors, record.settings)
            records.append(record)
            # Keep what finished: the manifest grows variant by variant.
            manifest["variants"] = {r.name: {"role": r.role, "backend": r.description,
                                             "settings": r.settings.as_dict(),
                                             "timings": r.timings, "parity": r.parity,
                                             "datasets": r.datasets}
                                    for r in records}
            folder.write_manifest(manifest)
    except (KeyboardInterrupt, BackendUnavailableError, InputError) as exc:
        # Say in the folder why it never finished; finished cache chunks stay for a rerun.
        manifest["status"] = "interrupted" if isinstance(exc, KeyboardInterrupt) else "failed"
        manifest["error"] = str(exc) or type(exc).__name__
        manifest["stopped"] = now_iso()
        folder.write_manifest(manifest)
        raise

    summary, _ = build_summary(recipe, manifest["variants"], folder)
    manifest["finished"] = now_iso()
    manifest["status"] = "finished"
    folder.write_manifest(manifest)
    folder.write_summary(summary)
    print_run_table(recipe, summary, out_dir)
    if recipe.batch_sensitivity is not None:
        from evalq.sensitivity import print_sensitivity

        print_sensitivity(summary)
    return RunOutcome(passed=bool(summary["passed"]), output=out_dir, summary=summary)


def _load_datasets(recipe: Recipe, recipe_path: Path, max_queries: int | None,
                   max_docs: int | None) -> list[Any]:
    from evalq.datasets.manifest import load_dataset

    loaded = []
    for i, spec in enumerate(recipe.datasets):
        try:
            loaded.append(load_dataset(spec, search_dirs=_search_dirs(recipe_path),
                                       base_dir=recipe_path.resolve().parent,
                                       max_queries=max_queries, max_docs=max_docs))
        except InputError as exc:
            if exc.file is None:  # an inline spec: point at the recipe
                exc.file = recipe_path
                exc.field = f"datasets.{i}" + (f".{exc.field}" if exc.field else "")
            raise
    names = [d.name for d in loaded]
    if len(set(names)) != len(names):
        raise InputError(message=f"two datasets share a name ({', '.join(names)})",
                         file=recipe_path, field="datasets",
                         fix="give inline datasets distinct 'name' fields")
    return loaded


def _parity_texts(datasets: list[Any], n: int) -> list[str]:
    """A few dozen texts from the first dataset: the longest (truncation is where engines
    differ most) and an even sample of the rest, queries and documents alike."""
    from evalq.parity import pick_parity_texts

    ds = datasets[0]
    return pick_parity_texts([*ds.queries.texts, *ds.corpus.texts_for_encoding()], n)


def _run_variant(
    recipe: Recipe, variant: Variant, role: str, settings: EncodingSettings, model_path: Path,
    datasets: list[Any], depth: int, folder: RunFolder, cache: Any,
    reference: dict[str, ReferenceState], judged: dict[str, Any], parity_texts: list[str],
    parity_ref: tuple[np.ndarray, EncodingSettings] | None, show_progress: bool,
) -> tuple[VariantRecord, np.ndarray | None]:
    from evalq import sensitivity
    from evalq.backends.factory import BuildContext, batching, create_encoder, resolve_device
    from evalq.composition import cache_composition
    from evalq.encode import encode_texts

    print(f"[evalq] {role} {variant.name}: {variant.backend}"
          f"{' ' + variant.dtype if variant.dtype != 'float32' else ''}"
          f"{' ' + variant.quantization['method'] if variant.quantization else ''}",
          file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    ctx = BuildContext(model_path=model_path, settings=settings, logs_dir=folder.logs,
                       device=resolve_device(variant.device), cache_dir=Path(recipe.cache_dir))
    encoder: Encoder = create_encoder(variant, ctx)
    record = VariantRecord(name=variant.name, role=role, description={}, settings=settings)
    parity_vectors = None
    try:
        record.timings["startup_s"] = time.perf_counter() - t0
        record.description = encoder.describe()
        plan = batching(variant, recipe.batch_tokens, ctx.device)
        options = {"batch_tokens": plan.batch_tokens, "max_batch": plan.max_batch,
                   "length_sorted": plan.length_sorted, "cache": cache,
                   "chunk_size": recipe.cache_chunk,
                   # batch-dependent variants: batching is part of the cache key (#14)
                   "composition": cache_composition(variant)}
        if recipe.parity.enabled:
            # Through the cache like everything else: a rerun recomputes nothing.
            parity_vectors = encode_texts(encoder, parity_texts, role="document",
                                          progress=False, **options).vectors
            record.parity = _parity_entry(parity_vectors, settings, parity_ref, variant, recipe)
        for ds in datasets:
            docs = encode_texts(encoder, ds.corpus.texts_for_encoding(recipe.title_separator),
                                role="document", progress=show_progress, **options)
            queries = encode_texts(encoder, list(ds.queries.texts), role="query",
                                   progress=show_progress, **options)
            _score_dataset(recipe, variant, role, ds, docs, queries, depth, folder, reference,
                           judged[ds.name], record)
            if sensitivity.measured(recipe, variant):  # #14: other batch compositions
                record.datasets[ds.name]["batch_sensitivity"] = sensitivity.measure_dataset(
                    recipe, variant, encoder, ds, reference[ds.name], folder, options, depth,
                    show_progress, docs, queries)
    finally:
        encoder.close()
    record.timings["total_s"] = time.perf_counter() - t0
    record.timings["peak_rss_mb"] = _peak_rss_mb()
    if variant.backend == "vllm":  # its engine or server ran in child processes
        record.timings["children_peak_rss_mb"] = _peak_rss_mb(resource.RUSAGE_CHILDREN)
    return record, parity_vectors


def _parity_checked(variant: Variant) -> bool:
    """Whether a variant must match the reference at parity: float32, unquantized, same
    weights. Others are reported only; their quantization is meant to move the cosine."""
    return (variant.dtype == "float32" and variant.quantization is None
            and variant.model is None and variant.vectors.quantize == "none")


def _parity_entry(vectors: np.ndarray, settings: EncodingSettings,
                  ref: tuple[np.ndarray, EncodingSettings] | None, variant: Variant,
                  recipe: Recipe) -> dict[str, Any]:
    """Parity preflight: the same texts through this backend and the reference's.

    A checked variant (:func:`_parity_checked`) must reach ``parity.min_cosine``; a miss
    fails its gate naming the settings that differ.
    """
    from evalq.parity import compare_vectors

    if ref is None:
        return {"texts": len(vectors), "role": "reference",
                "settings_fingerprint": settings.fingerprint()}
    result = compare_vectors(variant.name, settings, vectors, ref[1], ref[0],
                             recipe.parity.min_cosine)
    checked = _parity_checked(variant)
    return {"texts": len(vectors), "checked": checked,
            "min_cosine": recipe.parity.min_cosine, "cosine_mean": result.mean_cosine,
            "cosine_min": result.min_cosine, "passed": result.passed if checked else None,
            "reason": result.reason, "settings_fingerprint": result.settings_fingerprint,
            "differences": {k: list(v) for k, v in result.differences.items()}}


def _score_dataset(
    recipe: Recipe, variant: Variant, role: str, ds: Any, docs: Any, queries: Any, depth: int,
    folder: RunFolder, reference: dict[str, ReferenceState], judged: Any,
    record: VariantRecord,
) -> None:
    from evalq.metrics.judged import evaluate as evaluate_qrels
    from evalq.metrics.reference import evaluate_reference, vector_agreement
    from evalq.metrics.registry import parse_measures
    from evalq.search import search
    from evalq.vectorquant import VectorSpec, quantize_documents

    spec = stored = None
    if variant.vectors.quantize != "none":
        spec = VectorSpec(quantize=variant.vectors.quantize, rescore=variant.vectors.rescore)
        stored = quantize_documents(docs.vectors, spec)
    t0 = time.perf_counter()
    ranking = search(queries.vectors, docs.vectors, doc_ids=list(ds.corpus.ids),
                     query_ids=list(ds.queries.ids), depth=depth, vectors=spec,
                     quantized=stored)
    search_s = time.perf_counter() - t0
    folder.write_run(ds.name, variant.name, ranking)
    qrels_values = evaluate_qrels(ranking, judged, parse_measures(recipe.metrics))
    entry: dict[str, Any] = {
        "encode": {"documents": asdict(docs.stats), "queries": asdict(queries.stats)},
        "search_s": search_s,
        "documents": len(ds.corpus),
    }
    if spec is not None and stored is not None:
        entry["index"] = {**spec.record(docs.vectors.shape[1]), "bytes": stored.nbytes}
        # What the index holds, as floats: the drift a deployment actually sees.
        doc_vectors = stored.stored_vectors(np.arange(len(ds.corpus)))
    else:
        entry["index"] = {"quantize": "none", "bytes": int(docs.vectors.nbytes)}
        doc_vectors = docs.vectors
    values = dict(qrels_values.values)
    if role == "reference":
        reference[ds.name] = ReferenceState(ranking, queries.vectors, docs.vectors)
    else:
        ref = reference[ds.name]
        q_agree = vector_agreement(ref.query_vectors, queries.vectors, list(ds.queries.ids))
        d_agree = vector_agreement(ref.doc_vectors, doc_vectors, list(ds.corpus.ids))
        ref_values = evaluate_reference(ranking, ref.ranking,
                                        parse_measures(recipe.reference_metrics),
                                        query_agreement=q_agree)
        values.update(_align(ref_values, qrels_values.query_ids))
        folder.write_per_text(ds.name, variant.name, {
            "query": dict(zip(q_agree.ids, q_agree.cosine.tolist())),
            "document": dict(zip(d_agree.ids, d_agree.cosine.tolist())),
        })
        entry["vectors"] = {"query": asdict(q_agree.summary()),
                            "document": asdict(d_agree.summary())}
    folder.write_per_query(ds.name, variant.name, PerQuery(qrels_values.query_ids, values))
    record.datasets[ds.name] = entry


def _align(values: PerQuery, query_ids: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Reference measures are computed per reference query; qrels measures per judged
    query. Pair them on the judged queries (a judged query with no run row scores 0)."""
    position = {q: i for i, q in enumerate(values.query_ids)}
    idx = np.array([position.get(q, -1) for q in query_ids])
    out = {}
    for name, col in values.values.items():
        col = np.asarray(col, dtype=np.float64)
        out[name] = np.where(idx >= 0, col[np.maximum(idx, 0)], 0.0) if len(col) else \
            np.zeros(len(query_ids))
    return out


def parity_only(recipe_path: str | Path, *, texts: int = 32) -> bool:
    """`evalq parity`: the parity preflight alone, one backend alive at a time."""
    from evalq.backends.factory import BuildContext, create_encoder, resolve_device
    from evalq.parity import compare_vectors

    path = Path(recipe_path)
    recipe = load_recipe(path)
    _check_capabilities(recipe.variants, path)
    datasets = _load_datasets(recipe, path, max_queries=texts, max_docs=texts)
    sample = _parity_texts(datasets, texts)
    ref: tuple[np.ndarray, EncodingSettings] | None = None
    ok = True
    for variant in recipe.variants:
        model_path = _variant_model_path(recipe, variant, path)
        settings = _settings_for(recipe, variant, model_path, path)
        ctx = BuildContext(model_path, settings, Path(recipe.cache_dir) / "logs",
                           resolve_device(variant.device), Path(recipe.cache_dir))
        encoder = create_encoder(variant, ctx)
        try:
            vectors = encoder.embed(sample)
        finally:
            encoder.close()
        if ref is None:
            ref = (vectors, settings)
            print(f"{variant.name:24s} reference   settings {settings.fingerprint()}")
            continue
        result = compare_vectors(variant.name, settings, vectors, ref[1], ref[0],
                                 recipe.parity.min_cosine)
        exact = _parity_checked(variant)
        verdict = "ok" if result.passed else ("MISMATCH" if exact else "differs (quantized)")
        ok = ok and (result.passed or not exact)
        print(f"{variant.name:24s} cosine mean {result.mean_cosine:.7f} min "
              f"{result.min_cosine:.7f}  settings {result.settings_fingerprint}  {verdict} "
              f"{result.reason}")
    return ok

