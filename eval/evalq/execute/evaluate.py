"""`evalq run`: one recipe, end to end, in one direction.

recipe -> datasets -> for each variant (reference first): build the backend, parity
preflight, encode (cached), search, score against qrels and against the reference ->
statistics and gates (``scoring``) -> results folder (``results``); the app prints the
console table from that folder.

Variants run one at a time and their engines are closed before the next one starts, so
two engines never compete for memory. Only the reference's vectors and rankings are kept
in memory; a candidate's are reduced to per-query values as soon as they exist.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core import failure, messages
from evalq.core.errors import InputError
from evalq.core.protocols import Encoder
from evalq.core.values import EncodingSettings
from evalq.core.weights import model_fingerprint
from evalq.data.manifest import load_datasets
from evalq.data.streamed import is_streamed
from evalq.encode.batching import encode_texts
from evalq.encode.cache import EmbeddingCache
from evalq.encode.composition import cache_composition
from evalq.encode.executors import open_executor
from evalq.encode.parity import compare_vectors, exact_parity_required, parity_sample
from evalq.encode.rates import RateLedger
from evalq.engines.context import BuildContext
from evalq.engines.factory import batching, create_encoder, resolve_device
from evalq.engines.http_probe import ProbeTarget, probe_http_variants, probe_one
from evalq.engines.launch import start_launch
from evalq.engines.registry import embedding_backend
from evalq.execute import borrowed, sensitivity, sensitivity_measure
from evalq.execute import streamed as streamrun
from evalq.execute.calibration_sample import corpus_calibration
from evalq.execute.dataset_scoring import ReferenceState, VariantRecord, score_dataset
from evalq.execute.memsample import PeakRss
from evalq.execute.pipelines import run_pipelines
from evalq.execute.search import refuse_short_split, search_weight
from evalq.execute.search_decide import decide_search, with_search
from evalq.execute.served_graph import ServedGraph, served_graph
from evalq.execute.summarize import build_summary, with_pipelines
from evalq.measure.judged import JudgedIndex
from evalq.plan.sides import SidePlan
from evalq.plan.types import ParityPlan, Plan, VariantPlan
from evalq.plan.variant import SearchedVariant
from evalq.results import rundir
from evalq.results.folder import RunFolder, clean_json, host_record, now_iso, provenance
from evalq.results.hostpart import HostPart
from evalq.results.snippets import write_snippets

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunOutcome:
    passed: bool
    output: Path
    summary: dict[str, Any]


def run_recipe(plan: Plan, *, progress: bool | None = None,
               executor: str | None = None, address: str | None = None) -> RunOutcome:
    """Run every variant ``plan`` selected, then the pipelines, and write the results
    folder ``plan.output``. The app builds the plan (``evalq.recipe.plan.build_plan``);
    ``executor`` and ``address`` (the command line) override the plan's encoding executor.

    Prints progress to stderr only: the console table is the app's to print, from the
    folder this wrote (``evalq.app.api.run``)."""

    recipe_path = plan.recipe_file
    run = _prepare(plan, progress=progress, executor=executor, address=address)
    try:
        _run_variants(run)
        summary = _finish(run)
    except BaseException as exc:
        if isinstance(exc, InputError) and exc.file is None:
            exc.file = recipe_path
        # Say in the folder why it never finished; finished cache chunks stay for a rerun.
        rundir.record_stop(run.folder, run.manifest, exc)
        raise
    finally:
        failure.set_logs_dir(None)
        run.lock.release()
        if run.ray_exec is not None:
            run.ray_exec.__exit__(None, None, None)
    return RunOutcome(passed=bool(summary["passed"]), output=run.folder.root, summary=summary)


@dataclass
class _Run:
    """One run's state between its steps: what :func:`_prepare` resolved and opened, and
    what the variants add as they finish (the reference's state, records, manifest)."""

    plan: Plan
    recipe_path: Path
    planned: dict[str, VariantPlan]
    variants: list[SearchedVariant]
    datasets: list[Any]
    depth: int
    folder: RunFolder
    lock: rundir.RunLock
    cache: Any
    ray_exec: Any
    http_probe: dict[str, Any]
    probes: dict[str, ProbeTarget]
    model_paths: dict[str, Path]
    manifest: dict[str, Any]
    show_progress: bool
    judged: dict[str, JudgedIndex]
    parity_texts: list[str]
    lent: borrowed.Lent
    reference: dict[str, ReferenceState] = field(default_factory=dict)
    records: list[VariantRecord] = field(default_factory=list)
    parity_ref: tuple[np.ndarray, EncodingSettings] | None = None


def _prepare(plan: Plan, *, progress: bool | None, executor: str | None,
             address: str | None) -> _Run:
    """Probe, load the datasets, lock and prepare the folder, write the first manifest
    (status ``running``)."""

    started = now_iso()
    show_progress = sys.stderr.isatty() if progress is None else progress
    recipe_path = plan.recipe_file
    # The plan selected the variants (--only checked there) and resolved their models and
    # settings; the run reads them from it instead of resolving them again.
    planned = {vp.name: vp for vp in plan.variants}
    variants = [vp.options for vp in plan.variants]

    targets = probe_targets(plan)
    http_probe = probe_http_variants(targets, recipe_path)  # before any encoding
    ray_exec = open_executor(plan.executor, recipe_path, executor, address)
    max_queries, max_docs = plan.limits.max_queries, plan.limits.max_docs
    datasets = load_datasets(list(plan.dataset_specs), recipe_path, max_queries, max_docs)
    for d in datasets:  # before anything is encoded
        if plan.search is not None:
            refuse_short_split(plan.search, len(d.queries), d.name)
    depth = plan.depth  # metric cutoffs, gates and pipeline depths: what `evalq plan` prints
    out_dir = plan.output
    folder = RunFolder(out_dir)
    lock = rundir.RunLock(out_dir)  # a second run into this folder is refused (exit 2)
    lock.acquire()
    folder.prepare()
    failure.set_logs_dir(folder.logs)
    # a search's combinations write files beside the variants': they are not stale
    combinations = [c.name for c in plan.search.combinations] if plan.search else []
    rundir.remove_stale_variants(out_dir, [*plan.variant_names, *combinations])
    cache = EmbeddingCache(plan.cache_dir / "embeddings") if plan.cache_dir else None
    if ray_exec is not None and cache is None:  # Ray hands vectors over through a cache
        cache = ray_exec.private_cache(folder.root)
    model_paths = {name: vp.model_folder() for name, vp in planned.items()}
    made_with = provenance()
    manifest: dict[str, Any] = {
        "evalq_version": made_with["versions"]["evalq"], **made_with,
        "recipe_file": str(recipe_path),
        "recipe": copy.deepcopy(dict(plan.recorded)),
        "options": {"max_queries": max_queries, "max_docs": max_docs,
                    "only": list(plan.only) if plan.only is not None else None,
                    "use_cache": plan.cache_dir is not None, "depth": depth},
        "model": {"path": str(model_paths[plan.reference.name]),
                  "fingerprint": model_fingerprint(model_paths[plan.reference.name])},
        "datasets": {d.name: {"fingerprint": d.fingerprint, "queries": len(d.queries),
                              "documents": len(d.corpus), "source": dict(d.source)}
                     for d in datasets},
        "started": started,
        "status": "running",
        "http_probe": http_probe,
    }
    folder.write_manifest(manifest)
    return _Run(plan=plan, recipe_path=recipe_path, planned=planned,
                variants=variants, datasets=datasets, depth=depth, folder=folder, lock=lock,
                cache=cache, ray_exec=ray_exec, http_probe=http_probe,
                probes={t.variant.name: t for t in targets}, model_paths=model_paths,
                manifest=manifest, show_progress=show_progress,
                judged={d.name: JudgedIndex.build(d.qrels, d.corpus.ids) for d in datasets},
                parity_texts=parity_sample(datasets, plan.parity.texts),
                lent=borrowed.Lent(plan))


def _run_variants(run: _Run) -> None:
    """Each variant in turn (reference first), its engine closed before the next starts;
    the manifest grows variant by variant."""

    manifest = run.manifest
    if run.ray_exec is not None:
        run.ray_exec.__enter__()
        manifest["executor"] = run.ray_exec.describe()
    else:
        manifest["executor"] = {"type": "local"}
    for variant in run.variants:
        role = run.planned[variant.name].role
        settings = run.planned[variant.name].encoding_settings()
        engine = (variant.backend if run.planned[variant.name].sides.builds_engine
                  else "no engine, both sides reused")
        log.info(f"[evalq] {role} {variant.name}: {engine}"
                 f"{' ' + variant.dtype if variant.dtype != 'float32' else ''}"
                 f"{' ' + variant.quantization['method'] if variant.quantization else ''}")
        model_path = run.model_paths[variant.name]
        graph = served_graph(run.plan, run.planned[variant.name],
                             corpus_calibration(run.datasets, run.plan.title_separator))
        with PeakRss() as memory, _launched(run, variant, model_path, graph):
            record, parity_vectors = _run_variant(run, variant, role, settings, model_path)
        _record_memory(record, variant, memory.figures())
        if run.plan.cache_dir is not None:  # the next plan's time estimate reads it
            RateLedger(run.plan.cache_dir).record_encodes(
                run.planned[variant.name].rate_identity(),
                [d.get("encode") or {} for d in record.datasets.values()], variant.name)
        if graph.onnx_dir is not None:  # which evalq graph the server ran (onnx_from)
            record.description["served_graph"] = graph.record
        if role == "reference" and parity_vectors is not None:
            run.parity_ref = (parity_vectors, record.settings)
        run.records.append(record)
        # Keep what finished: the manifest grows variant by variant.
        manifest["variants"] = {r.name: {"role": r.role, "backend": r.description,
                                         "settings": r.settings.as_dict(),
                                         "timings": r.timings, "parity": r.parity,
                                         "datasets": r.datasets}
                                for r in run.records}
        run.folder.write_manifest(manifest)


def _finish(run: _Run) -> dict[str, Any]:
    """Pipelines, statistics and gates, snippets, the finished manifest and the summary
    (still inside the run's guard: SIGTERM or a bug here is recorded too); returns the
    summary as written."""

    manifest, folder = run.manifest, run.folder
    pipelines = None
    if run.plan.sections.pipelines:  # first stage -> reranker (evalq.execute.pipelines)
        pipelines = run_pipelines(run.plan, run.recipe_path, run.datasets, folder.root,
                                  run.judged, manifest["variants"], run.cache)
        manifest["pipelines"] = pipelines.manifest
    summary, _ = build_summary(run.plan.sections, manifest["variants"], folder)
    if pipelines is not None:  # retriever-stage gates judge a dense candidate too
        summary = with_pipelines(summary, pipelines.summary, pipelines.passed,
                                 pipelines.failed_gates)
    if run.plan.search is not None:  # a search run passes when it certifies a combination
        search = decide_search(run.plan.search, run.plan.sections, manifest["variants"],
                               folder, run.plan.capacity)
        summary = with_search(summary, search)
    write_snippets(folder, run.datasets, [r.name for r in run.records],
                   words=run.plan.sections.report.snippet_words,
                   title_separator=run.plan.title_separator)
    manifest["finished"] = now_iso()
    manifest["status"] = "finished"
    # The engines are loaded now: what they chose joins the host facts, and the summary
    # says which host (numerics class) its verdicts were certified on.
    manifest["host"] = host = host_record(engines=True)
    summary = summary.model_copy(update={"host": HostPart.model_validate(clean_json(host))})
    folder.write_manifest(manifest)
    written = folder.write_summary(summary)
    # The reference's shards of streamed corpora: the embedding cache holds the same.
    shutil.rmtree(folder.root / "shards", ignore_errors=True)
    return written


def _record_memory(record: VariantRecord, variant: SearchedVariant,
                   figures: dict[str, Any]) -> None:
    """This variant's own peak memory (sampled while it ran, not the process lifetime's)."""
    record.timings["peak_rss_mb"] = figures["peak_rss_mb"]
    record.timings["peak_rss_method"] = figures["peak_rss_method"]
    if variant.backend == "vllm":  # its engine or server ran in child processes
        record.timings["children_peak_rss_mb"] = figures["children_peak_rss_mb"]


def _run_variant(run: _Run, variant: SearchedVariant, role: str, settings: EncodingSettings,
                 model_path: Path) -> tuple[VariantRecord, np.ndarray | None]:
    plan, datasets, folder = run.plan, run.datasets, run.folder
    sides = run.planned[variant.name].sides
    t0 = time.perf_counter()
    ctx = BuildContext(model_path=model_path, settings=settings, logs_dir=folder.logs,
                       device=resolve_device(variant.device), cache_dir=plan.work_dir,
                       calibration=corpus_calibration(datasets, plan.title_separator))
    # A variant that borrows both sides (issue 31) has nothing to encode: no engine.
    encoder: Encoder | None = create_encoder(variant, ctx) if sides.builds_engine else None
    record = VariantRecord(name=variant.name, role=role, description={}, settings=settings)
    parity_vectors = None
    try:
        record.timings["startup_s"] = time.perf_counter() - t0
        options: dict[str, Any] = {}
        if encoder is None:
            record.description = borrowed.description(sides)
        else:
            record.description = encoder.describe()
            options = _encode_options(run, variant, ctx)
            parity_vectors = _encode_first(run, variant, ctx, encoder, options, sides, record,
                                           settings)
        for ds in datasets:
            docs, queries = _sides(run, variant, (encoder, ctx, options, record), ds)
            run.lent.keep(variant.name, ds.name, docs, queries)
            score_dataset(plan.sections, variant, role, ds, docs, queries, run.depth, folder,
                          run.reference, run.judged[ds.name], record)
            if plan.search is not None and variant.name in plan.search.section.weights:
                # every combination of this weight variant, from the vectors just encoded
                record.datasets[ds.name]["search"] = search_weight(
                    plan.search, plan.sections, variant.name, ds, docs.vectors,
                    queries.vectors, run.depth, folder, run.reference[ds.name],
                    run.judged[ds.name])
            # #14: other batch compositions (of the sides this variant encodes itself)
            if encoder is not None and sensitivity.measured(
                    plan.sections, variant):
                record.datasets[ds.name]["batch_sensitivity"] = sensitivity_measure.measure_dataset(
                    plan.sections, variant, encoder, ds, run.reference[ds.name], folder, options,
                    run.depth, run.show_progress, docs, queries)
    finally:
        if encoder is not None:
            encoder.close()
    record.timings["total_s"] = time.perf_counter() - t0
    return record, parity_vectors


def _encode_options(run: _Run, variant: SearchedVariant, ctx: BuildContext) -> dict[str, Any]:
    """How :func:`encode_texts` batches and caches this variant's texts."""
    cut = batching(variant, run.plan.batch_tokens, ctx.device)
    return {"batch_tokens": cut.batch_tokens, "max_batch": cut.max_batch,
            "length_sorted": cut.length_sorted, "cache": run.cache,
            "chunk_size": run.plan.limits.cache_chunk,
            # batch-dependent variants: batching is part of the cache key (#14)
            "composition": cache_composition(variant)}


def _encode_first(run: _Run, variant: SearchedVariant, ctx: BuildContext, encoder: Encoder,
                  options: dict[str, Any], sides: SidePlan, record: VariantRecord,
                  settings: EncodingSettings) -> np.ndarray | None:
    """Ray's encoding of every side this variant encodes (into the cache), then the parity
    preflight; returns the parity vectors."""
    plan, separator = run.plan, run.plan.title_separator
    if run.ray_exec is not None:  # fills the cache; the encode_texts calls then hit it
        work = [(run.parity_texts, "document")] if plan.parity.enabled else []
        for ds in run.datasets:
            if not is_streamed(ds) and sides.encodes_documents:  # streamed: block by block
                work.append((ds.corpus.texts_for_encoding(separator), "document"))
            if sides.encodes_queries:
                work.append((list(ds.queries.texts), "query"))
        record.timings["ray"] = run.ray_exec.encode_variant(variant, ctx, encoder, work,
                                                            options)
    if not plan.parity.enabled:
        return None
    # Through the cache like everything else: a rerun recomputes nothing.
    vectors = encode_texts(encoder, run.parity_texts, role="document", progress=False,
                           **options).vectors
    record.parity = _parity_entry(vectors, settings, run.parity_ref,
                                  run.planned[variant.name], plan.parity)
    return vectors


def _sides(run: _Run, variant: SearchedVariant, engine: tuple[Any, ...], ds: Any
           ) -> tuple[Any, Any]:
    """The variant's documents and queries of ``ds``: borrowed (issue 31), or encoded
    (``engine``: the encoder, its build context, encode options and the variant's record)."""
    encoder, ctx, options, record = engine
    planned = run.planned[variant.name]
    separator, show = run.plan.title_separator, run.show_progress
    docs: Any = run.lent.documents(planned.sides, ds, planned.where)
    if docs is None:
        assert encoder is not None  # the plan builds an engine for every encoded side
        if is_streamed(ds):  # block by block into shards (evalq.execute.streamed)
            hook = None if run.ray_exec is None else streamrun.ray_block_hook(
                run.ray_exec, variant, ctx, encoder, options, record.timings["ray"])
            docs = streamrun.encode_corpus(
                encoder, ds.corpus, streamrun.shards_root(run.folder.root, ds.name,
                                                          variant.name),
                title_separator=separator, options=options, progress=show, before_block=hook)
        else:
            docs = encode_texts(encoder, ds.corpus.texts_for_encoding(separator),
                                role="document", progress=show, **options)
    queries: Any = run.lent.queries(planned.sides, ds, planned.where)
    if queries is None:
        assert encoder is not None
        queries = encode_texts(encoder, list(ds.queries.texts), role="query", progress=show,
                               **options)
    return docs, queries


def probe_targets(plan: Plan) -> list[ProbeTarget]:
    """The plan's HTTP variants, as the probe takes them: model folder and settings as the
    plan resolved them, and where each sits in the recipe."""
    return [ProbeTarget(vp.options, vp.where, vp.model_folder(), vp.encoding_settings(),
                        plan.work_dir, launched=vp.launch is not None)
            for vp in plan.variants if embedding_backend(vp.options.backend).http_probe]


@contextlib.contextmanager
def _launched(run: _Run, variant: SearchedVariant, model_path: Path, graph: ServedGraph
              ) -> Iterator[None]:
    """The server the recipe's ``load.launch`` names for this variant, alive while the
    variant runs; probed as soon as it answers, since the start-of-run probe could not
    reach it yet (its report replaces the "deferred" note in the manifest)."""

    launched = start_launch(run.planned[variant.name].launch, variant, model_path,
                            run.folder.logs, onnx_dir=graph.onnx_dir)
    probe = run.probes.get(variant.name)
    try:
        if launched is not None and probe is not None and variant.name in run.http_probe:
            run.http_probe[variant.name] = probe_one(probe, run.recipe_path)
            run.manifest["http_probe"] = run.http_probe
        yield
    finally:
        if launched is not None:
            launched.close()


def _parity_entry(vectors: np.ndarray, settings: EncodingSettings,
                  ref: tuple[np.ndarray, EncodingSettings] | None, variant: VariantPlan,
                  parity: ParityPlan) -> dict[str, Any]:
    """Parity preflight: the same texts through this backend and the reference's.

    A checked variant (:func:`_parity_checked`) must reach ``parity.min_cosine``; a miss
    fails its gate naming the settings that differ.
    """

    if ref is None:
        return {"texts": len(vectors), "role": "reference",
                "settings_fingerprint": settings.fingerprint()}
    result = compare_vectors(variant.name, settings, vectors, ref[1], ref[0],
                             parity.min_cosine)
    checked = exact_parity_required(variant.parity_subject)
    return {"texts": len(vectors), "checked": checked,
            "min_cosine": parity.min_cosine, "cosine_mean": result.mean_cosine,
            "cosine_min": result.min_cosine, "passed": result.passed if checked else None,
            "reason": result.reason, "settings_fingerprint": result.settings_fingerprint,
            "differences": {k: list(v) for k, v in result.differences.items()}}




def parity_only(plan: Plan, *, texts: int = 32) -> bool:
    """`evalq parity`: the parity preflight alone, one backend alive at a time (the app
    plans it without the cache)."""

    datasets = load_datasets(list(plan.dataset_specs), plan.recipe_file, max_queries=texts,
                             max_docs=texts)
    sample = parity_sample(datasets, texts)
    ref: tuple[np.ndarray, EncodingSettings] | None = None
    ok = True
    for planned in plan.variants:
        if not planned.sides.builds_engine:  # borrows both sides: it has no engine
            continue
        variant = planned.options
        model_path, settings = planned.model_folder(), planned.encoding_settings()
        ctx = BuildContext(model_path, settings, plan.work_dir / "logs",
                           resolve_device(variant.device), plan.work_dir,
                           corpus_calibration(datasets, plan.title_separator))
        graph = served_graph(plan, planned, ctx.calibration)
        launched = start_launch(planned.launch, variant, model_path, ctx.logs_dir,
                                onnx_dir=graph.onnx_dir)
        encoder = create_encoder(variant, ctx)
        try:
            vectors = encoder.embed(sample)
        finally:
            encoder.close()
            if launched is not None:
                launched.close()
        if ref is None:
            ref = (vectors, settings)
            messages.output.info(f"{variant.name:24s} reference   settings "
                                 f"{settings.fingerprint()}")
            continue
        result = compare_vectors(variant.name, settings, vectors, ref[1], ref[0],
                                 plan.parity.min_cosine)
        exact = exact_parity_required(planned.parity_subject)
        verdict = "ok" if result.passed else ("MISMATCH" if exact else "differs (quantized)")
        ok = ok and (result.passed or not exact)
        messages.output.info(f"{variant.name:24s} cosine mean {result.mean_cosine:.7f} min "
                             f"{result.min_cosine:.7f}  settings "
                             f"{result.settings_fingerprint}  {verdict} {result.reason}")
    return ok
