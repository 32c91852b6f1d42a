"""One variant's database stage of ``evalq load`` (``load.databases``): its vectors
encoded, its index opened (the run's table or shard, reused by its key), searched once
in sequence (the answers every concurrent one is checked against), then each ``query``
workload's levels driven through :mod:`evalq.execute.load.dbsearch`.

Its summary entry is ``variants["<variant>@<kind>"]`` (``fp32-pg@pgvector``), with a
``database`` part that marks it a database stage (which database, in-process or not,
the table, whether it was reused, the sequential queries/s, the seconds the vectors
took to encode); its workloads, steps and knee
have the served variants' shape, so the console table, ``load/steps/`` and
``--plan-only`` read them alike. It gets knees but no capacity plan (the decision table
is about served formats). Workloads other than ``query`` do not apply and are listed
under ``database.skipped_workloads``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from evalq.execute.load.dbsearch import WorkerPool, check_pool, sweep_searches
from evalq.execute.load.dbvectors import StageVectors, stage_vectors
from evalq.execute.load.sweep import knee_record
from evalq.plan.load import LoadSection
from evalq.plan.types import Plan, VariantPlan
from evalq.results.load import LoadFolder
from evalq.retrieve.kinds import Documents, Queries
from evalq.retrieve.registry import INDEX_KINDS

log = logging.getLogger(__name__)


def stage_name(variant: str, kind: str) -> str:
    return f"{variant}@{kind}"


def drive_database(vp: VariantPlan, resolved: Plan, section: LoadSection,
                   folder: LoadFolder, summary: dict[str, Any]) -> list[str]:
    """The stage; returns why it makes ``evalq load`` exit 1 (empty: it does not).
    Bad input (a concurrency above what the database accepts) raises exit 2 before
    any traffic."""
    options = vp.options.index
    assert options is not None  # check_load: a database index
    name = stage_name(vp.name, options.kind)
    entry: dict[str, Any] = {"backend": vp.options.backend, "workloads": {},
                             "database": {"kind": options.kind}}
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
        entry["database"].update(in_process=bool(index.in_process), encode_s=encode_s)
        left = index.connections_left()
        check_pool(section, left, entry["database"]["label"], resolved.recipe_file)
        folder.write_summary(summary)

        def make_pool(size: int) -> WorkerPool:
            return WorkerPool(index, size, section.timeout_s, vectors.queries,
                              resolved.depth, expected)

        return _workloads(name, section, (len(vectors.query_ids), make_pool, left,
                                          index.server_pid()), entry, folder, summary)
    finally:
        index.close()


def _sequential(index: Any, vectors: StageVectors, depth: int,
                entry: dict[str, Any]) -> list[frozenset[str]]:
    """Every query once, in sequence (the run's way): the ids each concurrent answer must
    match, and the stage's ``database`` record."""
    ranking = index.search(Queries(vectors.query_ids, vectors.queries), depth)
    stats, proof = index.stats(), index.proof()
    detail = stats.detail
    entry["database"] = {
        "kind": index.options.kind, "dataset": vectors.dataset,
        "label": detail.get("database") or f"the Qdrant shard in {getattr(index, 'path', '')}",
        "table": detail.get("table"), "documents": len(vectors.doc_ids),
        "queries": len(vectors.query_ids), "depth": depth,
        "reused": detail.get("reused"), "rows_loaded": detail.get("rows_loaded"),
        "index_method": proof.method, "exact": proof.exact,
        "sequential_queries_per_s": detail.get("queries_per_s"),
        "embedding_cache": vectors.cached}
    return [frozenset(ranking.doc_ids[j] for j in row if j >= 0) for row in ranking.indices]


def _workloads(name: str, section: LoadSection, drive: tuple[int, Any, int | None, int | None],
               entry: dict[str, Any], folder: LoadFolder, summary: dict[str, Any]
               ) -> list[str]:
    """Each ``query`` workload's sweep; ``drive``: the query count, the pool maker, the
    sessions the database accepts (None: no limit) and its server's pid."""
    n_queries, make_pool, left, pid = drive
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

        outcome = sweep_searches(workload, section, n_queries, make_pool, left, on_step,
                                 pid)
        wentry["knee"] = knee_record(outcome)
        broken += [f"{name} {workload.name}: {b}" for b in outcome.broken]
        folder.write_summary(summary)
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
            f"{db.get('differs_from_sequential', 0)} answers differ{errors} "
            f"-> {step['verdict']}")
