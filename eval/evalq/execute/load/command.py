"""`evalq load RECIPE [--only V] [-o DIR]`: drive each served variant, plan capacity.

Order of work, one server alive at a time:

1. every check that needs only the recipe (``evalq.recipe.plan_load.check_load``, which
   the app runs): a ``load:`` section, the variants it names are served over HTTP, every
   URL is on loopback unless ``load.allow_hosts`` names its host, rerank workloads have a
   route — exit 2 before anything starts; then the app plans the recipe and hands the
   plan here;
2. the parity texts through the reference (usually in-process) once;
3. per variant: start its server (vLLM as ``evalq run`` does, a ``load.launch`` command,
   or attach to a URL), read its batch settings, check parity, embed the quality probes
   at idle, sweep every workload (each step carries probes: ``load.quality``), stop the
   server;
4. knees -> capacity plan -> decision table with the quality verdict of the folder's
   latest ``evalq run`` -> ``load/summary.json``.

Exit 0 when every workload found a knee within the error budget and every fp32 variant
matched the reference; 1 when a workload broke its SLO (or its requests failed: timeouts,
no successful request) at the first step, a step broke the error budget, a server died,
parity failed or the quality probes could not be embedded at idle; 2 for bad input or a
server that never started (naming the URL and the log); 130 on Ctrl-C, with the finished steps kept.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core import messages
from evalq.data.manifest import load_datasets
from evalq.data.streamed import sample_texts
from evalq.encode.parity import compare_vectors, exact_parity_required, parity_sample
from evalq.engines.context import BuildContext
from evalq.engines.factory import create_encoder, resolve_device
from evalq.engines.openai_http import TokenCounter
from evalq.engines.options import EncoderVariant
from evalq.engines.quantize.derive import CalibrationSource
from evalq.engines.registry import embedding_backend
from evalq.execute.calibration_sample import corpus_calibration
from evalq.execute.load.capacity import DecisionRow, Demand, Knee, plan_variant, recommend
from evalq.execute.load.dbstage import drive_database
from evalq.execute.load.dbwatch import sampling_text, table_cells
from evalq.execute.load.formats import decision_lines, served_format
from evalq.execute.load.quality import (
    ProbeRun,
    QualityFloor,
    choose_probes,
    cosine_floor,
    embed_idle,
)
from evalq.execute.load.serve import Served, serve
from evalq.execute.load.serverstats import read_server_settings
from evalq.execute.load.sweep import (
    Endpoint,
    TextPool,
    embed_request,
    knee_record,
    run_workload,
)
from evalq.plan.load import CapacitySection, LoadPlan, LoadSection
from evalq.plan.types import ParityPlan, Plan, VariantPlan
from evalq.results.folder import host_record, now_iso, provenance
from evalq.results.load import LoadFolder, quality_verdicts
from evalq.results.rundir import RunLock

log = logging.getLogger(__name__)


def _log(text: str) -> None:
    log.info(f"[evalq load] {text}")


# -- the command -----------------------------------------------------------------------------


def token_counter(model_path: Path, settings: Any) -> Any:
    """Token counts after truncation, for tokens/s. The fast ``tokenizers`` library when
    the model ships ``tokenizer.json`` (importing transformers costs tens of seconds on a
    busy 2-core machine), else the clients' :class:`TokenCounter`."""

    path = Path(model_path) / "tokenizer.json"
    if not path.is_file():
        return TokenCounter(settings, model_path)
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(path))
    tokenizer.no_padding()
    tokenizer.enable_truncation(settings.max_length, direction=settings.truncation_side)
    return lambda texts: [len(e.ids) for e in tokenizer.encode_batch(list(texts))]


def _texts(resolved: Plan) -> tuple[TextPool, list[str], CalibrationSource]:
    """The sweep's texts, the parity sample, and the corpus a static quantization whose
    graph a launched server serves (``onnx_from``) calibrates on."""
    datasets = load_datasets(list(resolved.dataset_specs), resolved.recipe_file,
                             resolved.limits.max_queries, resolved.limits.max_docs)
    ds = datasets[0]
    model_path = resolved.reference.model_folder()
    settings = resolved.reference.encoding_settings()
    queries = [settings.query_prefix + q for q in ds.queries.texts]
    documents = [settings.document_prefix + d
                 for d in sample_texts(ds, resolved.title_separator)]
    counter = token_counter(model_path, settings)
    pool = TextPool(queries, counter(queries), documents, counter(documents))
    calibration = corpus_calibration(datasets, resolved.title_separator)
    return pool, parity_sample(datasets, resolved.parity.texts), calibration


def _reference_vectors(resolved: Plan, texts: list[str]) -> Any:
    ref = resolved.reference
    model_path, settings = ref.model_folder(), ref.encoding_settings()
    ctx = BuildContext(model_path, settings, resolved.work_dir / "logs",
                       resolve_device(ref.options.device), resolved.work_dir)
    encoder = create_encoder(ref.options, ctx)
    try:
        return encoder.embed(texts), settings
    finally:
        encoder.close()


def _parity(variant: VariantPlan, parity: ParityPlan, served: Served, texts: list[str],
            ref: Any) -> dict[str, Any]:
    vectors = served.encoder.embed(texts)
    result = compare_vectors(variant.name, served.encoder.settings, vectors, ref[1], ref[0],
                             parity.min_cosine)
    checked = exact_parity_required(variant.parity_subject)
    return {"texts": len(texts), "checked": checked, "min_cosine": parity.min_cosine,
            "cosine_mean": result.mean_cosine, "cosine_min": result.min_cosine,
            "passed": result.passed if checked else None, "reason": result.reason}


def _format_step(variant: str, workload: str, step: dict[str, Any]) -> str:
    lat = step["latency_ms"]
    level = (f"{step['level']:g} req/s" if step["mode"] == "open"
             else f"concurrency {step['level']:g}")
    achieved = step["achieved_rps"] or 0.0
    texts = step["texts_per_s"] or 0.0
    cpu = step["server"].get("cpu_cores")
    cpu_text = f" server {cpu:.2f} cores" if cpu is not None else ""
    errors = f" errors {step['errors']}" if step["errors"] else ""
    q = step.get("quality") or {}
    quality = (f" probes {q['probes']} cos min {q['cosine_min']:.6f} top-{q['top_k']} "
               f"overlap min {q['overlap_min']:.2f}" if q.get("probes") else
               " probes 0" if q else "")
    p50 = "-" if lat["p50"] is None else f"{lat['p50']:.1f}"
    p99 = "-" if lat["p99"] is None else f"{lat['p99']:.1f}"
    return (f"{variant} {workload} [{step['series']}] {level}: {step['ok']} ok, "
            f"{achieved:.2f} req/s {texts:.1f} texts/s p50 {p50} p99 {p99} ms{cpu_text}"
            f"{quality}{errors} -> {step['verdict']}")


def replan(capacity: CapacitySection | None, run_root: Path) -> int:
    """``--plan-only``: the capacity plan and decision table again from stored knees, with
    the recipe's current ``capacity:`` and the folder's latest quality verdicts (change
    the target QPS or the price without measuring again)."""
    folder = LoadFolder(run_root)
    summary = folder.read_summary()
    summary["capacity"] = capacity.model_dump(mode="json") if capacity else None
    summary["replanned"] = now_iso()
    _finish(capacity, run_root, summary, folder)
    return 1 if summary.get("broken") else 0


def run_load(resolved: Plan, plan: LoadPlan) -> int:
    """The whole command; returns the exit code (0 or 1; errors raise). The app checked
    the load section (``check_load``, which chose the variants) and planned the recipe
    (``resolved``: capabilities of the vLLM variants on this machine, paths, outputs,
    every problem at once) before any server starts. The results folder is locked as
    ``evalq run`` locks it: a load into a folder another evalq is writing is refused
    (exit 2 naming the holder's PID) before any traffic."""
    lock = RunLock(resolved.output)
    lock.acquire()
    try:
        return _run_load(resolved, plan)
    finally:
        lock.release()


def _run_load(resolved: Plan, plan: LoadPlan) -> int:
    section, recipe_path, run_root = plan.section, resolved.recipe_file, resolved.output
    folder = LoadFolder(run_root)
    folder.prepare()
    summary: dict[str, Any] = {
        "recipe": resolved.recipe, "recipe_file": str(recipe_path), "status": "running",
        "started": now_iso(), **provenance(),
        "load": section.model_dump(mode="json"),
        "capacity": (resolved.capacity.model_dump(mode="json") if resolved.capacity
                     else None),
        "skipped_variants": plan.skipped, "variants": {},
    }
    folder.write_summary(summary)
    broken: list[str] = []
    try:
        for name in plan.databases:  # first: a database refused (exit 2) before any server
            broken += drive_database(resolved.variant(name), resolved, section, folder,
                                     summary)
        if plan.variants:
            broken += _drive_served(resolved, plan, folder, summary)
    except KeyboardInterrupt:
        summary["status"] = "interrupted"
        summary["stopped"] = now_iso()
        _finish(resolved.capacity, run_root, summary, folder)
        raise
    except BaseException as exc:
        summary["status"] = "failed"
        summary["error"] = str(exc) or type(exc).__name__
        summary["stopped"] = now_iso()
        folder.write_summary(summary)
        raise
    summary["status"] = "finished"
    summary["finished"] = now_iso()
    summary["host"] = host_record(engines=True)  # the engines it loaded, and their choices
    _finish(resolved.capacity, run_root, summary, folder)
    summary["broken"] = broken
    folder.write_summary(summary)
    for reason in broken:
        _log(f"FAILED: {reason}")
    return 1 if broken else 0


def _drive_served(resolved: Plan, plan: LoadPlan, folder: LoadFolder,
                  summary: dict[str, Any]) -> list[str]:
    """The served variants, one server alive at a time, after the parity texts."""
    section, broken = plan.section, []
    pool, parity_texts, calibration = _texts(resolved)
    ref = None
    if section.parity:
        _log(f"parity texts through the reference '{resolved.reference.name}'")
        ref = _reference_vectors(resolved, parity_texts)
    for variant in plan.variants:
        broken += _drive_variant(variant, resolved, folder, section, pool,
                                 parity_texts, ref, summary, calibration,
                                 end_to_end=variant.name in plan.databases)
    return broken


def _drive_variant(variant: EncoderVariant, resolved: Plan, folder: LoadFolder,
                   section: LoadSection, pool: TextPool, parity_texts: list[str], ref: Any,
                   summary: dict[str, Any], calibration: CalibrationSource | None = None,
                   end_to_end: bool = False) -> list[str]:
    broken: list[str] = []
    entry: dict[str, Any] = {"backend": variant.backend, "workloads": {}}
    summary["variants"][variant.name] = entry
    _log(f"{variant.name}: starting its server")
    t0 = time.perf_counter()
    if embedding_backend(variant.backend).serving != "engine" and variant.name in section.launch:
        _log(f"{variant.name}: starting {section.launch[variant.name].command[0]}")
    with serve(variant, resolved, folder, section, calibration) as served:
        entry["startup_s"] = round(time.perf_counter() - t0, 2)
        entry["server"] = served.describe
        entry["url"] = served.endpoint.url
        entry["started_by_evalq"] = served.endpoint.pid is not None
        entry["server_settings"] = read_server_settings(served.endpoint.url)
        if ref is not None:
            entry["parity"] = _parity(resolved.variant(variant.name), resolved.parity, served,
                                      parity_texts, ref)
            p = entry["parity"]
            _log(f"{variant.name}: parity cosine min {p['cosine_min']:.7f} "
                 f"({'checked' if p['checked'] else 'reported only'})")
            if p["passed"] is False:
                broken.append(f"{variant.name}: parity failed ({p['reason']})")
        probes, problem = _probe_run(variant, resolved, section, pool, served.endpoint)
        entry["quality"] = probes_record(probes, section, problem)
        if problem:
            broken.append(f"{variant.name}: quality probes not embedded at idle ({problem})")
        folder.write_summary(summary)
        for workload in section.workloads:
            wentry: dict[str, Any] = {"kind": workload.kind, "mode": workload.mode,
                                      "slo_p99_ms": workload.slo_p99_ms, "steps": []}
            entry["workloads"][workload.name] = wentry

            def on_step(step: dict[str, Any], m: Any, wentry: dict[str, Any] = wentry,
                        workload: Any = workload) -> None:
                wentry["steps"].append(step)
                folder.add_step(variant.name, workload.name,
                                {**step, "histogram": m.latency.to_dict()})
                folder.write_summary(summary)
                _log(_format_step(variant.name, workload.name, step))

            outcome = run_workload(served.endpoint, workload, section, pool, on_step, probes)
            wentry["knee"] = knee_record(outcome)
            broken += [f"{variant.name} {workload.name}: {b}" for b in outcome.broken]
            folder.write_summary(summary)
            if outcome.server_died:
                broken.append(f"{variant.name}: the server died; remaining workloads skipped")
                return broken
        if end_to_end:  # its database too: each query through this server, then searched
            broken += drive_database(resolved.variant(variant.name), resolved, section,
                                     folder, summary, (served.endpoint, pool))
    return broken


def _probe_run(variant: EncoderVariant, resolved: Plan, section: LoadSection, pool: TextPool,
               endpoint: Endpoint) -> tuple[ProbeRun | None, str | None]:
    """The variant's probe set embedded at idle (before any load), with its quality floor
    (``load.quality``, else :func:`cosine_floor` of the backend's declared
    batch-composition tolerance); ``(None, why)`` when the idle answers failed."""
    q = section.quality
    if q.probes == 0 or not pool.queries or not pool.documents:
        return None, None
    qi, di = choose_probes(q.probes, len(pool.queries), len(pool.documents), section.seed)
    queries, documents = [pool.queries[i] for i in qi], [pool.documents[i] for i in di]

    def make(texts: Any, tokens: int) -> Any:
        return embed_request(endpoint, texts, tokens)

    try:
        qv = embed_idle(endpoint.url, [make([t], 0) for t in queries], section.timeout_s)
        dv = embed_idle(endpoint.url, [make([t], 0) for t in documents], section.timeout_s)
    except RuntimeError as exc:
        return None, str(exc)
    spec = embedding_backend(variant.backend)
    tolerance = (spec.batch_dependence(variant).tolerance if spec.batch_dependence
                 else None)
    if q.min_cosine is not None:
        floor = QualityFloor(q.min_cosine, q.min_overlap, "load.quality.min_cosine")
    else:
        cosine, source = cosine_floor(tolerance, resolved.parity.min_cosine)
        floor = QualityFloor(cosine, q.min_overlap, source)
    _log(f"{variant.name}: {len(qi)} probe queries and {len(di)} probe documents embedded "
         f"at idle; quality floor cosine {floor.min_cosine:.6f} ({floor.source})")
    return ProbeRun(queries, [pool.query_tokens[i] for i in qi], documents,
                    [pool.document_tokens[i] for i in di], np.stack(qv), np.stack(dv), make, q,
                    floor), None


def probes_record(probes: ProbeRun | None, section: LoadSection,
                  problem: str | None) -> dict[str, Any]:
    """``variants.<name>.quality`` in the summary: the probe set and the floor."""
    if probes is None:
        return {"enabled": False, "error": problem} if problem else {"enabled": False}
    return {"enabled": True, "queries": len(probes.queries), "documents": len(probes.documents),
            "seed": section.seed, "share": probes.settings.share,
            "top_k": probes.settings.top_k, "min_cosine": probes.floor.min_cosine,
            "min_overlap": probes.floor.min_overlap, "floor_source": probes.floor.source}


def _finish(cap: CapacitySection | None, run_root: Path, summary: dict[str, Any],
            folder: LoadFolder) -> None:
    """Capacity plan and decision table from whatever finished; printed and stored."""
    quality = quality_verdicts(run_root)
    summary["quality_source"] = str(run_root / "summary.json") if quality else None
    rows: list[DecisionRow] = []
    demand = None if cap is None else Demand(cap.target_qps, cap.rerank_depth,
                                             cap.ingest_docs_per_day, cap.headroom,
                                             cap.min_replicas)
    for name, entry in summary["variants"].items():
        knees: dict[str, Knee] = {}
        for w in entry["workloads"].values():
            k = w.get("knee")
            if k is None:
                continue
            knee = Knee(w["kind"], k["per_s"], k["unit"], k["lower_bound"], k["reason"],
                        k.get("level"))
            best = knees.get(w["kind"])
            if best is None or (knee.per_s or 0) > (best.per_s or 0):
                knees[w["kind"]] = knee
        entry["knees"] = {k: v.__dict__ for k, v in knees.items()}
        if demand is None or cap is None or entry.get("database") is not None:
            continue  # a database stage has knees, not replicas of a served format
        plan = plan_variant(name, knees, demand, cap.price(name))
        parity = entry.get("parity") or {}
        row = DecisionRow(name, quality.get(name, "unknown"),
                          "not checked" if parity.get("passed") is None
                          else ("ok" if parity["passed"] else "differs"), plan)
        entry["plan"] = plan.as_dict()
        rows.append(row)
    summary["decision"] = [{"variant": r.variant, "quality": r.quality, "parity": r.parity,
                            "replicas": r.plan.replicas, "feasible": r.plan.feasible,
                            "dollars_per_hour": r.plan.dollars_per_hour,
                            "dollars_per_million_queries": r.plan.dollars_per_million_queries,
                            "sentence": r.sentence(),
                            "format": served_format(summary["variants"][r.variant]),
                            "knees": summary["variants"][r.variant].get("knees")} for r in rows]
    summary["recommendation"] = recommend(rows)
    folder.write_summary(summary)
    _print_table(summary, folder)


def _knee_step(passing: list[dict[str, Any]], level: float | None) -> dict[str, Any] | None:
    """The step the knee was read from, by its level (sweep.knee_of records it): a
    closed-loop knee is the series' best passing step, which need not be its last."""
    for step in passing:
        if level is not None and float(step["level"]) == level:
            return step
    return passing[-1] if passing else None


# The knee column is 14 wide: "requests/s" was cut to "reque/s".
_SHORT_UNIT = {"requests/s": "req/s"}


def _cosine(*steps: dict[str, Any] | None) -> str:
    """Probe cosine min of one step, or the worst over steps; '-' when none was probed."""
    values = [s["quality"]["cosine_min"] for s in steps
              if s and (s.get("quality") or {}).get("cosine_min") is not None]
    return f"{min(values):.6f}" if values else "-"


def _server_cells(entry: dict[str, Any], steps: list[dict[str, Any]]) -> tuple[str, str]:
    """The table's server cores and MiB: a database stage's say why when not sampled."""
    if entry.get("database") is not None:
        return table_cells(steps)
    cores = max((s["server"].get("cpu_cores") or 0.0 for s in steps), default=0.0)
    mem = max((s["server"].get("peak_rss_mb") or 0.0 for s in steps), default=0.0)
    return f"{cores:.2f}", f"{mem:.0f}"


def _database_line(entry: dict[str, Any]) -> str:
    """What a database stage measured: which database, where it runs, the answers."""
    db = entry.get("database") or {}
    steps = [s for w in entry["workloads"].values() for s in w["steps"]]
    differ = sum((s.get("database") or {}).get("differs_from_sequential", 0) for s in steps)
    where = ("in-process: threads of evalq's own process" if db.get("in_process")
             else "one connection per client" if db.get("kind") == "pgvector"
             else "threads sharing one client")
    how = ("each query through the served model, then searched" if db.get("end_to_end")
           else "query vectors encoded before the traffic")
    return (f"database stage: {db.get('label', '?')} ({where}), {how}; {differ} answers "
            f"differ from the sequential search; {sampling_text(db.get('sampling'))}")


def _print_table(summary: dict[str, Any], folder: LoadFolder) -> None:
    """The knees and the decision table, on the result channel (stdout)."""
    say = messages.output.info
    say(f"\nevalq load: {summary['recipe']} ({summary['status']}) -> {folder.root}")
    head = (f"{'variant':22s} {'workload':10s} {'series':10s} {'knee':>14s} {'p99@knee':>9s} "
            f"{'peak p99':>9s} {'srv cores':>9s} {'srv MiB':>8s} {'cos@knee':>9s} "
            f"{'min cos':>9s}")
    say(head)
    say("-" * len(head))
    for name, entry in summary["variants"].items():
        for wname, w in entry["workloads"].items():
            k = w.get("knee") or {}
            steps = w["steps"]
            passing = [s for s in steps if s["series"] == k.get("series")
                       and s["verdict"] == "pass"]
            at = _knee_step(passing, k.get("level"))
            knee = ("none" if k.get("per_s") is None else
                    f"{'>=' if k.get('lower_bound') else ''}{k['per_s']:.1f} "
                    f"{_SHORT_UNIT.get(k['unit'], k['unit'])}")
            p99 = at["latency_ms"]["p99"] if at else None
            worst = max((s["latency_ms"]["p99"] or 0.0 for s in steps), default=0.0)
            cores, mem = _server_cells(entry, steps)
            say(f"{name:22s} {wname:10s} {k.get('series') or '-'!s:10s} {knee:>14s} "
                f"{(f'{p99:.0f} ms' if p99 else '-'):>9s} {worst:>6.0f} ms {cores:>9s} "
                f"{mem:>8s} {_cosine(at):>9s} {_cosine(*steps):>9s}")
            if k.get("stopped_by"):
                say(f"  {'':20s} knee stopped by {k['stopped_by']}")
        if entry.get("database") is not None:
            say(f"  {'':20s} {_database_line(entry)}")
    decision = summary.get("decision") or []
    if decision:
        say("\ndecision: each format's quality verdict beside its knees and its plan")
    for line in decision_lines(decision):
        say(line)
    for row in decision:
        say(f"  {row['sentence']}")
    if summary.get("recommendation"):
        say(f"  => {summary['recommendation']}")
