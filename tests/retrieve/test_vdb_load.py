"""``evalq load``'s database stage (issue 30, "query p50/p99 through the database, also
under evalq load's concurrency"): concurrent searches of a real pgvector table (the
session's embedded PostgreSQL) and a real Qdrant shard, through the load generator's
own schedules and histograms; the recipe checks that refuse a bad ``load.databases``.

Asserted: structure and consistency (one step per level, every request answered, the
percentiles ordered, every query answered and each answer the sequential search's ids,
one session per client), and what of the database server each step sampled (its
process tree here, the memory it reports, or why nothing), never a wall-clock figure."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalq.app.cli import main
from evalq.core.errors import InputError
from evalq.execute.load.dbsearch import (
    SearchDrive,
    SearchGenerator,
    WorkerPool,
    check_pool,
    search_requests,
    step_bounds,
    sweep_searches,
)
from evalq.plan.load import LoadSection
from evalq.results.dbpart import ServerSampling, StepServer
from evalq.results.load import LoadFolder
from evalq.retrieve import pg_server
from evalq.retrieve.kinds import Documents, KindOptions, Queries
from evalq.retrieve.registry import INDEX_KINDS
from support import recipes

N_DOCS, N_QUERIES, DEPTH = 400, 12, 10
HERE = Path(__file__).resolve().parents[1]  # tests/
FAST = {"warmup_s": 0.1, "duration_s": 0.4, "max_requests": 400, "timeout_s": 5,
        "parity": False}
CLOSED = {"name": "search", "kind": "query", "slo_p99_ms": 5000,
          "closed_loop": {"concurrency": [1, 3]}}


def _corpus() -> tuple[Documents, Queries]:
    rng = np.random.default_rng(11)
    docs = rng.standard_normal((N_DOCS, 16)).astype(np.float32)
    queries = (docs[:N_QUERIES] + 0.1 * rng.standard_normal((N_QUERIES, 16))).astype(
        np.float32)
    return (Documents(tuple(f"doc-{i:04d}" for i in range(N_DOCS)), docs),
            Queries(tuple(f"q{i}" for i in range(N_QUERIES)), queries))


def _options(spec: dict[str, Any]) -> KindOptions:
    return INDEX_KINDS.parse(spec, "vectors", "faiss")


def _drive(options: KindOptions, workload: dict[str, Any]) -> tuple[list[dict[str, Any]],
                                                                     Any, bool]:
    """The stage's sweep on a real index: its steps, its outcome, and in_process."""
    steps, outcome, in_process, _ = _drive_watched(options, workload)
    return steps, outcome, in_process


def _drive_watched(options: KindOptions, workload: dict[str, Any]
                   ) -> tuple[list[dict[str, Any]], Any, bool, dict[str, Any]]:
    """:func:`_drive`, with the stage's ``sampling`` record (what of the server each step
    sampled), typed as the summary stores it."""
    docs, queries = _corpus()
    section = LoadSection.model_validate({**FAST, "workloads": [workload]})
    index: Any = INDEX_KINDS.build(options, docs, where="candidates.x.index")
    try:
        ranking = index.search(queries, DEPTH)
        expected = [frozenset(ranking.doc_ids[j] for j in row if j >= 0)
                    for row in ranking.indices]
        steps: list[dict[str, Any]] = []

        def make_pool(size: int) -> WorkerPool:
            return WorkerPool(index, size, section.timeout_s, queries.vectors, DEPTH,
                              expected)

        left, watch = index.connections_left(), index.server_watch()
        drive = SearchDrive(search_requests(N_QUERIES), lambda: SearchGenerator(
            step_bounds(section), make_pool, left), watch)
        outcome = sweep_searches(section.workloads[0], section, drive,
                                 lambda s, m: steps.append(s))
        sampling = ServerSampling.model_validate(watch.record()).model_dump()
        for step in steps:
            StepServer.model_validate(step["server"])
        return steps, outcome, index.in_process, sampling
    finally:
        index.close()


def _consistent(steps: list[dict[str, Any]], levels: list[float]) -> None:
    assert [s["level"] for s in steps] == levels
    for step in steps:
        db, lat = step["database"], step["latency_ms"]
        assert step["errors"] == {} and step["ok"] == step["sent"] > 0, step
        assert step["verdict"] == "pass", step["reasons"]
        assert lat["p50"] <= lat["p95"] <= lat["p99"] <= lat["max"]
        # warm-up searches are checked too: at least every measured one
        assert db["answers_checked"] >= step["ok"]
        assert db["queries_answered"] == min(N_QUERIES, db["answers_checked"])
        assert db["differs_from_sequential"] == 0 and db["first_error"] is None


@pytest.mark.server
def test_pgvector_under_concurrency_answers_as_in_sequence(pg: pg_server.Database) -> None:
    options = _options({"kind": "pgvector", "allow_root": True, "m": 8,
                        "ef_construction": 32, "ef_search": 40})
    steps, outcome, in_process = _drive(options, CLOSED)
    _consistent(steps, [1.0, 3.0])
    assert [s["database"]["workers"] for s in steps] == [1, 3]  # a connection per client
    assert not in_process
    assert all(s["server"]["peak_rss_mb"] > 0 for s in steps)  # the postmaster sampled
    assert outcome.knee.per_s is not None and outcome.knee.unit == "requests/s"


@pytest.mark.server
def test_a_dsn_server_on_this_host_is_sampled_as_the_embedded_one(
        pg: pg_server.Database) -> None:
    """The session's embedded PostgreSQL reached by its dsn (a unix socket): to evalq a
    team's server on this host. Its postmaster is found from the connection's backend
    (no data folder known) and its tree sampled per step, as the embedded one's."""
    assert pg.data_dir is not None
    postmaster = pg_server.postmaster_pid(pg)
    options = _options({"kind": "pgvector", "dsn": pg.dsn, "m": 8, "ef_construction": 32})
    steps, _, _, sampling = _drive_watched(options, CLOSED)
    _consistent(steps, [1.0, 3.0])
    assert sampling["sampled"] and sampling["how"] == "process"
    assert sampling["pid"] == postmaster and sampling["reason"] is None
    assert "unix socket" in sampling["scope"]
    for step in steps:
        server = step["server"]
        assert server["sampled"] and server["peak_rss_mb"] > 0 and server["cpu_s"] >= 0
        # the postmaster and at least the step's own backends
        assert server["processes"] >= 1 + step["database"]["workers"]


@pytest.mark.server
def test_qdrant_under_concurrency_answers_as_in_sequence(qdrant_root: Path) -> None:
    options = _options({"kind": "qdrant", "path": str(qdrant_root),
                        "hnsw_config": {"m": 8, "ef_construct": 32}})
    steps, _, in_process = _drive(options, {**CLOSED, "open_loop": {"rates": [50]},
                                            "closed_loop": None})
    _consistent(steps, [50.0])
    assert in_process and steps[0]["mode"] == "open"
    assert steps[0]["server"]["cpu_s"] is None  # no server process of its own
    assert not steps[0]["server"]["sampled"]
    assert steps[0]["server"]["reason"].startswith("in-process")


@pytest.mark.server
def test_a_qdrant_server_by_url_under_concurrency_answers_as_in_sequence(
        qdrant_standin: Any) -> None:
    """Through qdrant-client to the loopback stand-in (a real Qdrant server cannot run
    here): threads share the one client, and the server is not this process's."""
    options = _options({"kind": "qdrant", "url": qdrant_standin.url,
                        "collection": "load-by-url",
                        "hnsw_config": {"m": 8, "ef_construct": 32}})
    steps, _, in_process, sampling = _drive_watched(options, CLOSED)
    _consistent(steps, [1.0, 3.0])
    assert not in_process
    # the stand-in listens inside this test's process: no server process to sample, but
    # its /metrics page (its own RSS under Qdrant's gauge names) is read per step
    assert sampling["sampled"] and sampling["how"] == "metrics" and sampling["pid"] is None
    assert "evalq's own process" in sampling["reason"]
    assert sampling["metrics"] == f"{qdrant_standin.url}/metrics"
    for step in steps:
        server = step["server"]
        assert server["sampled"] and server["cpu_s"] is None
        assert server["reported_resident_mb"] > 0 and server["reports"] >= 2


_STANDIN_PROCESS = """
import sys
sys.path.insert(0, sys.argv[1])
from support.qdrant_standin import QdrantStandIn
server = QdrantStandIn()
print(server.url, flush=True)
sys.stdin.read()  # until the test closes it
server.close()
"""


@pytest.mark.server
@pytest.mark.process
def test_a_qdrant_server_listening_on_this_host_is_sampled_by_its_process() -> None:
    """The stand-in in a process of its own, as a team's Qdrant on this host: found by
    the port its URL names, its process sampled per step, and its /metrics read too."""
    child = subprocess.Popen([sys.executable, "-c", _STANDIN_PROCESS, str(HERE)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        url = child.stdout.readline().strip()
        options = _options({"kind": "qdrant", "url": url, "collection": "load-sampled",
                            "hnsw_config": {"m": 8, "ef_construct": 32}})
        steps, _, _, sampling = _drive_watched(options, CLOSED)
        child.stdin.close()
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    _consistent(steps, [1.0, 3.0])
    assert sampling["sampled"] and sampling["how"] == "process+metrics"
    assert sampling["pid"] == child.pid and sampling["reason"] is None
    for step in steps:
        server = step["server"]
        assert server["cpu_s"] is not None and server["peak_rss_mb"] > 0
        assert server["processes"] >= 1 and server["reported_resident_mb"] > 0


@pytest.mark.server
@pytest.mark.process
def test_a_qdrant_server_that_dies_between_levels_ends_the_stage_as_server_died() -> None:
    """The stand-in in a process of its own, killed once the first level is done: the
    next level's searches fail, the index's own check finds no server, and the stage
    stops there as ``server_died`` (the third level never runs) instead of judging
    every remaining level as errors of a live server."""
    child = subprocess.Popen([sys.executable, "-c", _STANDIN_PROCESS, str(HERE)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    docs, queries = _corpus()
    section = LoadSection.model_validate({**FAST, "workloads": [
        {**CLOSED, "closed_loop": {"concurrency": [1, 2, 3]}}], "stop_on_break": False})
    try:
        assert child.stdout is not None
        url = child.stdout.readline().strip()
        index: Any = INDEX_KINDS.build(_options({"kind": "qdrant", "url": url,
                                                 "collection": "load-dies",
                                                 "timeout": 2}), docs, where="x.index")
        ranking = index.search(queries, DEPTH)
        expected = [frozenset(ranking.doc_ids[j] for j in row if j >= 0)
                    for row in ranking.indices]
        assert index.alive()
        steps: list[dict[str, Any]] = []

        def kill_after_first(step: dict[str, Any], m: Any) -> None:
            steps.append(step)
            if len(steps) == 1:
                child.kill()
                child.wait()

        drive = SearchDrive(search_requests(N_QUERIES), lambda: SearchGenerator(
            step_bounds(section), lambda size: WorkerPool(
                index, size, section.timeout_s, queries.vectors, DEPTH, expected), None),
            index.server_watch(), index.alive)
        outcome = sweep_searches(section.workloads[0], section, drive, kill_after_first)
        assert not index.alive()
        index.close()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert [s["verdict"] for s in steps] == ["pass", "server_died"]
    assert outcome.server_died and steps[1]["errors"] and steps[1]["ok"] == 0
    assert "stopped answering" in steps[1]["reasons"][-1]
    assert steps[1]["database"]["first_error"] and outcome.broken


def test_a_postgresql_that_takes_no_session_is_not_alive() -> None:
    """Nothing listens on the port: the check says so within its timeout, no raise."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    db = pg_server.Database(dsn=f"host=127.0.0.1 port={port} user=x dbname=x",
                            label="a server that is gone")
    assert not pg_server.answers(db)


@pytest.mark.server
def test_the_embedded_postgresql_is_alive(pg: pg_server.Database) -> None:
    assert pg_server.answers(pg)


@pytest.mark.server
def test_a_qdrant_server_answering_no_metrics_is_not_sampled(qdrant_standin: Any) -> None:
    """Neither a process of its own here nor a /metrics page: not sampled, with why."""
    options = _options({"kind": "qdrant", "url": qdrant_standin.url,
                        "collection": "load-by-url",
                        "hnsw_config": {"m": 8, "ef_construct": 32}})
    qdrant_standin.metrics = False
    try:
        steps, _, _, sampling = _drive_watched(options, {**CLOSED, "closed_loop": {
            "concurrency": [2]}})
    finally:
        qdrant_standin.metrics = True
    assert not sampling["sampled"] and sampling["how"] is None
    assert "evalq's own process" in sampling["reason"]
    assert all(not s["server"]["sampled"] and s["server"]["peak_rss_mb"] is None
               and s["server"]["reported_resident_mb"] is None for s in steps)


def test_a_concurrency_above_the_connections_left_is_exit_2() -> None:
    section = LoadSection.model_validate({**FAST, "workloads": [
        {"name": "ingest", "kind": "ingest", "slo_p99_ms": 100, "batch_sizes": [4],
         "closed_loop": {"concurrency": [500]}}, CLOSED]})
    check_pool(section, 3, "the embedded PostgreSQL in x", Path("r.yaml"))  # 3 fits
    check_pool(section, None, "a Qdrant shard", Path("r.yaml"))  # in-process: no limit
    with pytest.raises(InputError) as err:
        check_pool(section, 2, "the embedded PostgreSQL in x", Path("r.yaml"))
    assert err.value.field == "load.workloads.1.closed_loop.concurrency"
    assert "at most 2" in (err.value.fix or "") and "max_connections" in str(err.value)


# -- the recipe's load.databases -----------------------------------------------------------

@pytest.fixture
def _repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(HERE.parent)  # datasets/ manifests are found from the repo root


def _recipe(tmp_path: Path, load: dict[str, Any], index: dict[str, Any] | None) -> Path:
    candidate: dict[str, Any] = {"name": "fp32-db", "backend": "inprocess"}
    if index is not None:
        candidate["index"] = index
    return recipes.write(tmp_path / "recipe.yaml", recipes.recipe(
        "db-load", datasets=["pydocs"], queries=N_QUERIES, docs=40, cache=tmp_path / "cache",
        reference={"name": "fp32", "backend": "inprocess"}, candidates=[candidate],
        load={**FAST, "workloads": [CLOSED], **load}))


@pytest.mark.parametrize(("load", "index", "needles"), [
    ({"databases": ["fp32"]}, None, ("load.databases.0", "has no index, not a database",
                                     "kind: pgvector or qdrant")),
    ({"databases": ["fp32-db"]}, {"kind": "faiss", "factory": "HNSW16"},
     ("a 'faiss' index, not a database",)),
    ({"databases": ["nope"]}, None, ("unknown variant 'nope'",)),
    ({"databases": ["fp32-db"], "launch": {"fp32-db": {"command": ["server"]}}},
     {"kind": "qdrant"}, ("load.launch starts", "before any server starts")),
    ({"databases": ["fp32-db"], "workloads": [
        {"name": "ingest", "kind": "ingest", "slo_p99_ms": 100, "batch_sizes": [4],
         "closed_loop": {"concurrency": [1]}}]}, {"kind": "qdrant"},
     ("no workload is kind: query", "field 'load.workloads'")),
])
@pytest.mark.usefixtures("_repo_root")
def test_a_bad_database_stage_is_refused_before_anything_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], load: dict[str, Any],
        index: dict[str, Any] | None, needles: tuple[str, ...]) -> None:
    recipe = _recipe(tmp_path, load, index)
    assert main(["load", str(recipe), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "recipe.yaml" in err
    for needle in needles:
        assert needle in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.server
@pytest.mark.usefixtures("_repo_root")
def test_evalq_load_drives_the_database_stage(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The whole command on a recipe whose only load target is a pgvector variant: the
    stage's entry, steps, knee and console lines, and the table of a second load reused
    from the first (the cache's data folder)."""
    recipe = _recipe(tmp_path, {"databases": ["fp32-db"]},
                     {"kind": "pgvector", "allow_root": True, "m": 8})
    try:
        for out in ("out", "again"):
            assert main(["load", str(recipe), "-o", str(tmp_path / out)]) == 0
    finally:
        for folder in (tmp_path / "cache" / "vdb").glob("postgresql-*"):
            pg_server.stop_embedded(folder.resolve())
    text = capsys.readouterr().out
    assert "fp32-db@pgvector" in text and "database stage: the embedded PostgreSQL" in text
    assert "0 answers differ from the sequential search" in text
    summary = LoadFolder(tmp_path / "again").read_summary()
    entry = summary["variants"]["fp32-db@pgvector"]
    assert list(summary["variants"]) == ["fp32-db@pgvector"]
    db = entry["database"]
    assert db["reused"] and db["rows_loaded"] == 0 and not db["in_process"]
    assert db["index_method"] == "Index Scan" and db["queries"] == N_QUERIES
    assert db["kind"] == "pgvector" and db["encode_s"] >= 0
    assert db["sampling"]["sampled"] and db["sampling"]["how"] == "process"
    assert db["index_bytes"] > 0 and db["database_bytes"] >= db["table_bytes"] > 0
    steps = entry["workloads"]["search"]["steps"]
    _consistent(steps, [1.0, 3.0])
    assert entry["workloads"]["search"]["knee"]["per_s"] is not None
    stored = (tmp_path / "again" / "load" / "steps" / "fp32-db@pgvector" / "search.jsonl")
    lines = [json.loads(line) for line in stored.read_text().splitlines()]
    assert [line["histogram"]["count"] for line in lines] == [s["ok"] for s in steps]


@pytest.mark.server
@pytest.mark.usefixtures("_repo_root")
def test_a_served_variant_with_a_database_gets_an_end_to_end_stage(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A served variant (a stand-in answering one fixed vector per text) with a Qdrant
    index: its HTTP sweep, its database alone (vectors encoded through the server
    first), then each query through the server and searched, timed as one request;
    every end-to-end answer is the sequential search's (the server's vectors do not
    change under load)."""
    from support.load_test_server import Behaviour, LoadTestServer

    with LoadTestServer(Behaviour(delay_ms=1, text_vectors=True, dim=384)) as server:
        recipe = recipes.write(tmp_path / "recipe.yaml", recipes.recipe(
            "db-e2e", datasets=["pydocs"], queries=N_QUERIES, docs=40,
            cache=tmp_path / "cache", reference={"name": "fp32", "backend": "inprocess"},
            candidates=[{"name": "srv", "backend": "openai",
                         "http": {"url": server.url, "model": "test"},
                         "index": {"kind": "qdrant"}}],
            load={**FAST, "databases": ["srv"], "quality": {"probes": 0},
                  "workloads": [CLOSED]}))
        assert main(["load", str(recipe), "-o", str(tmp_path / "out")]) == 0, \
            capsys.readouterr().err
    assert "each query through the served model, then searched" in capsys.readouterr().out
    variants = LoadFolder(tmp_path / "out").read_summary()["variants"]
    assert list(variants) == ["srv@qdrant", "srv", "srv@qdrant+model"]
    alone, both = variants["srv@qdrant"], variants["srv@qdrant+model"]
    assert not alone["database"]["end_to_end"] and both["database"]["end_to_end"]
    assert both["database"]["reused"] and both["database"]["rows_loaded"] == 0
    for entry in (alone, both):
        _consistent(entry["workloads"]["search"]["steps"], [1.0, 3.0])
    # through the model: one HTTP answer per search
    assert sum(s["status_codes"].get("200", 0) for s in both["workloads"]["search"]["steps"]
               ) == sum(s["ok"] for s in both["workloads"]["search"]["steps"])
