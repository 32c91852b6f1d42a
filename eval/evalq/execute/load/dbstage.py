"""One variant's database stage of ``evalq load`` (``load.databases``): its vectors
encoded, its index opened (the run's table or shard, reused by its key), searched once
in sequence (the answers every concurrent one is checked against), then each ``query``
workload's levels driven through :mod:`evalq.execute.load.dbsearch`.

Its summary entry is ``variants["<variant>@<kind>"]`` (``fp32-pg@pgvector``), with a
``database`` part that marks it a database stage (which database, in-process or not,
the table, whether it was reused, the sequential queries/s, the seconds the vectors
took to encode, the sizes the database reports, and ``sampling``: what of its server
each step's ``server`` part samples, or why nothing, from
:mod:`evalq.retrieve.serverwatch`); its workloads, steps and knee
have the served variants' shape, so the console table, ``load/steps/`` and
``--plan-only`` read them alike. It gets knees but no capacity plan (the decision table
is about served formats). Workloads other than ``query`` do not apply and are listed
under ``database.skipped_workloads``.

A variant that is also served gets a second stage, ``<variant>@<kind>+model``, driven
from its server's context in :mod:`evalq.execute.load.command` (each query through the
served model, then searched: :mod:`evalq.execute.load.dbe2e`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from evalq.execute.load.dbe2e import EndToEndGenerator
from evalq.execute.load.dbsearch import (
    SearchDrive,
    SearchGenerator,
    WorkerPool,
    check_pool,
    search_requests,
    step_bounds,
    sweep_searches,
)
from evalq.execute.load.dbvectors import StageVectors, stage_vectors
from evalq.execute.load.dbwatch import step_text
from evalq.execute.load.generator import LoadGenerator
from evalq.execute.load.sweep import Endpoint, TextPool, embed_request, knee_record
from evalq.plan.load import LoadSection
from evalq.plan.types import Plan, VariantPlan
from evalq.results.load import LoadFolder
from evalq.retrieve.kinds import Documents, Queries
from evalq.retrieve.registry import INDEX_KINDS
from evalq.retrieve.serverwatch import ServerWatch

log = logging.getLogger(__name__)


def stage_name(variant: str, kind: str) -> str:
    return f"{variant}@{kind}"


def drive_database(vp: VariantPlan, resolved: Plan, section: LoadSection,
                   folder: LoadFolder, summary: dict[str, Any],
                   served: tuple[Endpoint, TextPool] | None = None) -> list[str]:
    """The stage; returns why it makes ``evalq load`` exit 1 (empty: it does not).
    Bad input (a concurrency above what the database accepts) raises exit 2 before
    any traffic. ``served``: the variant's running server and the load's texts, for the
    end-to-end stage (``<variant>@<kind>+model``: each query through the model first)."""
    options = vp.options.index
    assert options is not None  # check_load: a database index
    name = stage_name(vp.name, options.kind) + ("+model" if served else "")
    entry: dict[str, Any] = {"backend": vp.options.backend, "workloads": {},
                             "database": {"kind": options.kind,
                                          "end_to_end": served is not None}}
    summary["variants"][name] = entry
    log.info(f"[evalq load] {name}: encoding the queries and documents (before any "
             "traffic: no model in the measured loop)")
    t0 = time.perf_counter()
    vectors = stage_vectors(vp, resolved)
    encode_s = round(time.perf_counter() - t0, 2)
    index: Any = INDEX_KINDS.build(options, Documents(vectors.doc_ids, vectors.documents),
                                   where=f"{vp.where}.index")
    try:
        entry["startup_s"] = round(time.perf_counter() - t0, 2)
        expected = _sequential(index, vectors, resolved.depth, entry)
        watch = index.server_watch()
        entry["database"].update(in_process=bool(index.in_process), encode_s=encode_s,
                                 sampling=watch.record())
        left = index.connections_left()
        check_pool(section, left, entry["database"]["label"], resolved.recipe_file)
        folder.write_summary(summary)

        def make_pool(size: int) -> WorkerPool:
            return WorkerPool(index, size, section.timeout_s, vectors.queries,
                              resolved.depth, expected)

        drive = _drive(vp, section, vectors, (make_pool, left, watch, index.alive), served)
        return _workloads(name, section, drive, entry, folder, summary)
    finally:
        index.close()


def _sequential(index: Any, vectors: StageVectors, depth: int,
                entry: dict[str, Any]) -> list[frozenset[str]]:
    """Every query once, in sequence (the run's way): the ids each concurrent answer must
    match, and the stage's ``database`` record."""
    ranking = index.search(Queries(vectors.query_ids, vectors.queries), depth)
    stats, proof = index.stats(), index.proof()
    detail = stats.detail
    entry["database"].update({
        "dataset": vectors.dataset,
        "label": detail.get("database") or detail.get("server")
        or f"the Qdrant shard in {getattr(index, 'path', '')}",
        "table": detail.get("table") or detail.get("collection"),
        "documents": len(vectors.doc_ids),
        "queries": len(vectors.query_ids), "depth": depth,
        "reused": detail.get("reused"), "rows_loaded": detail.get("rows_loaded"),
        "index_method": proof.method, "exact": proof.exact,
        "sequential_queries_per_s": detail.get("queries_per_s"),
        "embedding_cache": vectors.cached,
        **{k: detail.get(k) for k in ("table_bytes", "index_bytes", "database_bytes")}})
    return [frozenset(ranking.doc_ids[j] for j in row if j >= 0) for row in ranking.indices]


def _drive(vp: VariantPlan, section: LoadSection, vectors: StageVectors,
           database: tuple[Any, int | None, ServerWatch, Callable[[], bool]],
           served: tuple[Endpoint, TextPool] | None) -> SearchDrive:
    """The requests and generators of the stage: searches of the encoded vectors, or
    (``served``) query texts through the model, then searched. ``database``: the pool
    maker, the sessions the database accepts (None: no limit), what of its server to
    sample, and whether it still answers (ConcurrentIndex.alive)."""
    make_pool, left, watch, alive = database
    bounds = step_bounds(section)
    if served is None:
        return SearchDrive(search_requests(len(vectors.query_ids)),
                           lambda: SearchGenerator(bounds, make_pool, left), watch, alive)
    endpoint, pool = served
    requests = [replace(embed_request(endpoint, [text], tokens), payload=row)
                for row, (text, tokens) in enumerate(zip(pool.queries[:len(vectors.query_ids)],
                                                         pool.query_tokens))]
    return SearchDrive(requests, lambda: EndToEndGenerator(
        LoadGenerator(endpoint.url, bounds), SearchGenerator(bounds, make_pool, left),
        endpoint.api, vp.options.vectors.dims), watch, alive, endpoint.alive)


def _workloads(name: str, section: LoadSection, drive: SearchDrive,
               entry: dict[str, Any], folder: LoadFolder, summary: dict[str, Any]
               ) -> list[str]:
    """Each ``query`` workload's sweep."""
    broken: list[str] = []
    skipped = [w.name for w in section.workloads if w.kind != "query"]
    if skipped:
        entry["database"]["skipped_workloads"] = {w: "a database stage drives query searches only"
                                      for w in skipped}
    for workload in (w for w in section.workloads if w.kind == "query"):
        wentry: dict[str, Any] = {"kind": workload.kind, "mode": workload.mode,
                                  "slo_p99_ms": workload.slo_p99_ms, "steps": []}
        entry["workloads"][workload.name] = wentry

        def on_step(step: dict[str, Any], m: Any, wentry: dict[str, Any] = wentry,
                    wname: str = workload.name) -> None:
            wentry["steps"].append(step)
            folder.add_step(name, wname, {**step, "histogram": m.latency.to_dict()})
            folder.write_summary(summary)
            log.info(f"[evalq load] {_format(name, wname, step)}")

        outcome = sweep_searches(workload, section, drive, on_step)
        wentry["knee"] = knee_record(outcome)
        broken += [f"{name} {workload.name}: {b}" for b in outcome.broken]
        folder.write_summary(summary)
        if outcome.server_died:
            broken.append(f"{name}: the {outcome.died} died; remaining workloads skipped")
            break
    return broken


def _format(name: str, workload: str, step: dict[str, Any]) -> str:
    lat, db = step["latency_ms"], step["database"]
    level = (f"{step['level']:g} req/s" if step["mode"] == "open"
             else f"concurrency {step['level']:g}")
    show = {k: "-" if lat[k] is None else f"{lat[k]:.2f}" for k in ("p50", "p95", "p99")}
    errors = f" errors {step['errors']}" if step["errors"] else ""
    return (f"{name} {workload} [database] {level}: {step['ok']} ok, "
            f"{step['achieved_rps'] or 0.0:.1f} queries/s p50 {show['p50']} p95 "
            f"{show['p95']} p99 {show['p99']} ms, {db.get('workers', 0)} sessions, "
            f"{db.get('differs_from_sequential', 0)} answers differ{errors}, "
            f"{step_text(step['server'])} -> {step['verdict']}")
