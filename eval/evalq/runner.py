"""`evalq run`: one recipe, end to end, in one direction.

recipe -> datasets -> for each variant (reference first): build the backend, parity
preflight, encode (cached), search, score against qrels and against the reference ->
statistics and gates (``scoring``) -> results folder (``results``) -> console table.

Variants run one at a time and their engines are closed before the next one starts, so
two engines never compete for memory. Only the reference's vectors and rankings are kept
in memory; a candidate's are reduced to per-query values as soon as they exist.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evalq.backends.base import Encoder, EncodingSettings
from evalq.config import Recipe, Variant, load_recipe
from evalq.errors import InputError
from evalq.metrics.values import PerQuery
from evalq.plan import build_plan
from evalq.ranking import Ranking
from evalq.results import RunFolder, environment, git_revision, now_iso, package_versions
from evalq.summary_stats import align


@dataclass
class ReferenceState:
    """What candidates are compared against, per dataset."""

    ranking: Ranking
    query_vectors: np.ndarray
    doc_vectors: Any  # an (n, dim) matrix, or the shards folder of a streamed corpus


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
    from evalq.locations import dataset_search_dirs

    return [d.path for d in dataset_search_dirs(recipe_path)]


def _settings_for(
    recipe: Recipe, variant: Variant, model_path: Path, file: Path
) -> EncodingSettings:
    from evalq.modelinfo import resolve_settings

    merged = recipe.encoding.merged(variant.encoding)
    return resolve_settings(model_path, merged.model_dump(exclude_none=True), file=file)


def _variant_model_path(recipe: Recipe, variant: Variant, file: Path) -> Path:
    from evalq.modelinfo import resolve_model_path

    return resolve_model_path(variant.model or recipe.model.path, file=file)


def run_recipe_file(path: str | Path, **kwargs: Any) -> RunOutcome:
    from evalq.config import recipe_from_located
    from evalq.locations import resolve_recipe
    from evalq.yamlsource import load_yaml

    path = resolve_recipe(path)
    located = load_yaml(path)
    return run_recipe(recipe_from_located(located, path), path, _located=located, **kwargs)


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
    _located: Any = None,
    wide: bool = False,
    executor: str | None = None,
    address: str | None = None,
) -> RunOutcome:
    from evalq import failure, rundir
    from evalq.embcache import EmbeddingCache
    from evalq.memsample import PeakRss
    from evalq.metrics.judged import JudgedIndex
    from evalq.modelinfo import model_fingerprint
    from evalq.report.console import print_run_table
    from evalq.scoring import add_pipeline_gates, build_summary
    from evalq.snippets import write_snippets

    started = now_iso()
    show_progress = sys.stderr.isatty() if progress is None else progress
    # Every recipe error that can be known before work, at once (plan.py).
    plan = build_plan(recipe, recipe_path, output=output, only=only, max_queries=max_queries,
                      max_docs=max_docs, use_cache=use_cache, located=_located)
    variants = _select_variants(recipe, only, recipe_path)
    from evalq.backends.http_probe import probe_http_variants
    from evalq.scaleout import open_executor

    http_probe = probe_http_variants(recipe, variants, recipe_path)  # before any encoding
    ray_exec = open_executor(recipe, recipe_path, executor, address)
    max_queries = max_queries or recipe.max_queries
    max_docs = max_docs or recipe.max_docs
    datasets = _load_datasets(recipe, recipe_path, max_queries, max_docs)
    depth = plan.depth  # metric cutoffs, gates and pipeline depths: what `evalq plan` prints
    out_dir = plan.output
    folder = RunFolder(out_dir)
    lock = rundir.RunLock(out_dir)  # a second run into this folder is refused (exit 2)
    lock.acquire()
    folder.prepare()
    failure.set_logs_dir(folder.logs)
    rundir.remove_stale_variants(out_dir, [v.name for v in recipe.variants])
    cache = EmbeddingCache(Path(recipe.cache_dir) / "embeddings") if use_cache else None
    if ray_exec is not None and cache is None:  # Ray hands vectors over through a cache
        cache = ray_exec.private_cache(folder.root)
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
        "http_probe": http_probe,
    }
    folder.write_manifest(manifest)

    reference: dict[str, ReferenceState] = {}
    judged = {d.name: JudgedIndex.build(d.qrels, d.corpus.ids) for d in datasets}
    records: list[VariantRecord] = []
    parity_texts = _parity_texts(datasets, recipe.parity.texts)
    parity_ref: tuple[np.ndarray, EncodingSettings] | None = None
    try:
        if ray_exec is not None:
            ray_exec.__enter__()
            manifest["executor"] = ray_exec.describe()
        else:
            manifest["executor"] = {"type": "local"}
        for variant in variants:
            role = "reference" if variant is recipe.reference else "candidate"
            settings = _settings_for(recipe, variant, model_paths[variant.name], recipe_path)
            print(f"[evalq] {role} {variant.name}: {variant.backend}"
                  f"{' ' + variant.dtype if variant.dtype != 'float32' else ''}"
                  f"{' ' + variant.quantization['method'] if variant.quantization else ''}",
                  file=sys.stderr, flush=True)
            with PeakRss() as memory, _launched(recipe, variant, model_paths[variant.name],
                                                folder, recipe_path, http_probe, manifest):
                record, parity_vectors = _run_variant(
                    recipe, variant, role, settings, model_paths[variant.name], datasets,
                    depth, folder, cache, reference, judged, parity_texts, parity_ref,
                    show_progress, ray_exec,
                )
            _record_memory(record, variant, memory.figures())
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
        pipelines = None
        if recipe.pipelines:  # first stage -> reranker pipelines (evalq.pipeline)
            from evalq.pipeline import run_pipelines

            pipelines = run_pipelines(recipe, recipe_path, datasets, out_dir, judged,
                                      manifest["variants"])
            manifest["pipelines"] = pipelines.manifest
        # Statistics and gates inside the guard: SIGTERM or a bug here is recorded too.
        summary, _ = build_summary(recipe, manifest["variants"], folder)
        if pipelines is not None:
            summary.update(pipelines=pipelines.summary,
                           passed=summary["passed"] and pipelines.passed,
                           failed_gates=[*summary["failed_gates"], *pipelines.failed_gates])
            add_pipeline_gates(summary)  # retriever-stage gates judge a dense candidate
        write_snippets(folder, datasets, [r.name for r in records],
                       words=recipe.report.snippet_words, title_separator=recipe.title_separator)
        manifest["finished"] = now_iso()
        manifest["status"] = "finished"
        folder.write_manifest(manifest)
        folder.write_summary(summary)
        # The reference's shards of streamed corpora: the embedding cache holds the same.
        shutil.rmtree(folder.root / "shards", ignore_errors=True)
    except BaseException as exc:
        if isinstance(exc, InputError) and exc.file is None:
            exc.file = recipe_path
        # Say in the folder why it never finished; finished cache chunks stay for a rerun.
        rundir.record_stop(folder, manifest, exc)
        raise
    finally:
        failure.set_logs_dir(None)
        lock.release()
        if ray_exec is not None:
            ray_exec.__exit__(None, None, None)
    print_run_table(recipe, summary, out_dir, wide=wide)
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
    differ most) and an even sample of the rest, queries and documents alike. Of a
    streamed corpus, its first block."""
    from evalq.datasets.streamed import sample_texts
    from evalq.parity import pick_parity_texts

    ds = datasets[0]
    return pick_parity_texts([*ds.queries.texts, *sample_texts(ds, " ")], n)


def _record_memory(record: VariantRecord, variant: Variant, figures: dict[str, Any]) -> None:
    """This variant's own peak memory (sampled while it ran, not the process lifetime's)."""
    record.timings["peak_rss_mb"] = figures["peak_rss_mb"]
    record.timings["peak_rss_method"] = figures["peak_rss_method"]
    if variant.backend == "vllm":  # its engine or server ran in child processes
        record.timings["children_peak_rss_mb"] = figures["children_peak_rss_mb"]


def _run_variant(
    recipe: Recipe, variant: Variant, role: str, settings: EncodingSettings, model_path: Path,
    datasets: list[Any], depth: int, folder: RunFolder, cache: Any,
    reference: dict[str, ReferenceState], judged: dict[str, Any], parity_texts: list[str],
    parity_ref: tuple[np.ndarray, EncodingSettings] | None, show_progress: bool,
    ray_exec: Any = None,
) -> tuple[VariantRecord, np.ndarray | None]:
    from evalq import sensitivity, streamrun
    from evalq.backends.factory import BuildContext, batching, create_encoder, resolve_device
    from evalq.composition import cache_composition
    from evalq.datasets.streamed import is_streamed
    from evalq.encode import encode_texts

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
        if ray_exec is not None:  # fills the cache; the encode_texts calls below then hit it
            work = [(parity_texts, "document")] if recipe.parity.enabled else []
            for ds in datasets:
                if not is_streamed(ds):  # a streamed corpus goes block by block (below)
                    work.append((ds.corpus.texts_for_encoding(recipe.title_separator),
                                 "document"))
                work.append((list(ds.queries.texts), "query"))
            record.timings["ray"] = ray_exec.encode_variant(variant, ctx, encoder, work,
                                                            options)
        if recipe.parity.enabled:
            # Through the cache like everything else: a rerun recomputes nothing.
            parity_vectors = encode_texts(encoder, parity_texts, role="document",
                                          progress=False, **options).vectors
            record.parity = _parity_entry(parity_vectors, settings, parity_ref, variant, recipe)
        for ds in datasets:
            docs: Any
            if is_streamed(ds):  # block by block into shards (evalq.streamrun)
                hook = None if ray_exec is None else streamrun.ray_block_hook(
                    ray_exec, variant, ctx, encoder, options, record.timings["ray"])
                docs = streamrun.encode_corpus(
                    encoder, ds.corpus, streamrun.shards_root(folder.root, ds.name,
                                                              variant.name),
                    title_separator=recipe.title_separator, options=options,
                    progress=show_progress, before_block=hook)
            else:
                docs = encode_texts(encoder,
                                    ds.corpus.texts_for_encoding(recipe.title_separator),
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
    return record, parity_vectors


@contextlib.contextmanager
def _launched(recipe: Recipe, variant: Variant, model_path: Path, folder: RunFolder,
              recipe_path: Path, http_probe: dict[str, Any], manifest: dict[str, Any]
              ) -> Iterator[None]:
    """The server the recipe's ``load.launch`` names for this variant, alive while the
    variant runs; probed as soon as it answers, since the start-of-run probe could not
    reach it yet (its report replaces the "deferred" note in the manifest)."""
    from evalq.backends.http_probe import launched_by_recipe, probe_one
    from evalq.load.launch import start_launch

    launched = start_launch(recipe, variant, model_path, folder.logs)
    try:
        if launched is not None and launched_by_recipe(recipe, variant) \
                and variant.name in http_probe:
            http_probe[variant.name] = probe_one(recipe, variant, recipe_path)
            manifest["http_probe"] = http_probe
        yield
    finally:
        if launched is not None:
            launched.close()


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
    from evalq import streamrun
    from evalq.metrics.judged import evaluate as evaluate_qrels
    from evalq.metrics.reference import evaluate_reference, vector_agreement
    from evalq.metrics.registry import parse_measures
    from evalq.search import search
    from evalq.vectorquant import VectorSpec, quantize_documents

    sharded = isinstance(docs, streamrun.ShardedDocuments)  # a streamed corpus
    spec = stored = None
    if variant.vectors.quantize != "none":
        spec = VectorSpec(quantize=variant.vectors.quantize, rescore=variant.vectors.rescore)
        stored = quantize_documents(docs.vectors, spec)
    t0 = time.perf_counter()
    if sharded:
        ranking = streamrun.search(queries.vectors, docs, ds.corpus.ids, ds.queries.ids,
                                   depth)
    else:
        ranking = search(queries.vectors, docs.vectors, doc_ids=list(ds.corpus.ids),
                         query_ids=list(ds.queries.ids), depth=depth, vectors=spec,
                         quantized=stored)
    search_s = time.perf_counter() - t0
    exact_ranking = None
    if variant.index is not None:  # judged on its ANN run; the exact one splits the loss
        from evalq.annsearch import ann_search

        exact_ranking = ranking
        ann = ann_search(queries.vectors, docs.vectors, ds.corpus.ids, ds.queries.ids, depth,
                         variant.index, where=f"candidates.{variant.name}.index")
        ranking = ann.ranking
        folder.write_run(ds.name, f"{variant.name}.exact", exact_ranking)
    folder.write_run(ds.name, variant.name, ranking)
    qrels_values = evaluate_qrels(ranking, judged, parse_measures(recipe.metrics))
    entry: dict[str, Any] = {
        "encode": {"documents": asdict(docs.stats), "queries": asdict(queries.stats)},
        "search_s": search_s,
        "documents": len(ds.corpus),
    }
    if sharded:
        entry["index"] = {"quantize": "none", "bytes": docs.nbytes}
        entry["stream"] = {"blocks": docs.blocks, "shards": docs.shards,
                           "shard_rows": ds.corpus.options.shard_rows}
        doc_vectors = docs.root
    elif spec is not None and stored is not None:
        entry["index"] = {**spec.record(docs.vectors.shape[1]), "bytes": stored.nbytes}
        # What the index holds, as floats: the drift a deployment actually sees.
        doc_vectors = stored.stored_vectors(np.arange(len(ds.corpus)))
    else:
        entry["index"] = {"quantize": "none", "bytes": int(docs.vectors.nbytes)}
        doc_vectors = docs.vectors
    if exact_ranking is not None:
        from evalq.annsearch import judge_index

        ref_state = reference.get(ds.name)
        entry["index"] = judge_index(
            ann, variant.index, exact_ranking, judged=judged, metrics=recipe.metrics,
            reference_metrics=recipe.reference_metrics,
            reference_run=ref_state.ranking if ref_state else None,
            reference_values=folder.read_per_query(ds.name, recipe.reference.name)
            if ref_state else None)
    values = dict(qrels_values.values)
    if role == "reference":
        reference[ds.name] = ReferenceState(ranking, queries.vectors, doc_vectors)
    else:
        ref = reference[ds.name]
        q_agree = vector_agreement(ref.query_vectors, queries.vectors, list(ds.queries.ids))
        if sharded:  # shard by shard; this candidate's shards are not needed after
            d_agree = streamrun.document_agreement(ref.doc_vectors, docs.root, ds.corpus.ids)
            shutil.rmtree(docs.root, ignore_errors=True)
        else:
            d_agree = vector_agreement(ref.doc_vectors, doc_vectors, list(ds.corpus.ids))
        ref_values = evaluate_reference(ranking, ref.ranking,
                                        parse_measures(recipe.reference_metrics),
                                        query_agreement=q_agree)
        values.update(align(ref_values, qrels_values.query_ids))
        folder.write_per_text(ds.name, variant.name, {
            "query": dict(zip(q_agree.ids, q_agree.cosine.tolist())),
            "document": dict(zip(d_agree.ids, d_agree.cosine.tolist())),
        })
        entry["vectors"] = {"query": asdict(q_agree.summary()),
                            "document": asdict(d_agree.summary())}
    folder.write_per_query(ds.name, variant.name, PerQuery(qrels_values.query_ids, values))
    record.datasets[ds.name] = entry


def parity_only(recipe_path: str | Path, *, texts: int = 32) -> bool:
    """`evalq parity`: the parity preflight alone, one backend alive at a time."""
    from evalq.backends.factory import BuildContext, create_encoder, resolve_device
    from evalq.locations import resolve_recipe
    from evalq.parity import compare_vectors

    path = resolve_recipe(recipe_path)
    recipe = load_recipe(path)
    build_plan(recipe, path, use_cache=False)
    datasets = _load_datasets(recipe, path, max_queries=texts, max_docs=texts)
    sample = _parity_texts(datasets, texts)
    ref: tuple[np.ndarray, EncodingSettings] | None = None
    ok = True
    for variant in recipe.variants:
        model_path = _variant_model_path(recipe, variant, path)
        settings = _settings_for(recipe, variant, model_path, path)
        ctx = BuildContext(model_path, settings, Path(recipe.cache_dir) / "logs",
                           resolve_device(variant.device), Path(recipe.cache_dir))
        from evalq.load.launch import start_launch

        launched = start_launch(recipe, variant, model_path, ctx.logs_dir)
        encoder = create_encoder(variant, ctx)
        try:
            vectors = encoder.embed(sample)
        finally:
            encoder.close()
            if launched is not None:
                launched.close()
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

