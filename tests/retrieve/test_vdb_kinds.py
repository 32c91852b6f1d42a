"""The vector-database kinds (``pgvector``, ``qdrant``) against exact FAISS search.

The real embedded PostgreSQL + pgvector starts once per test session (``pg``) and every
pgvector index of the session shares it; Qdrant's engine runs in-process, its shards in
one session folder (``qdrant_root``). Both are ``server`` tier; the option refusals need
neither and run in the fast tier.

What is checked: exact settings (pgvector without an index, Qdrant ``exact``) rank as
exact FAISS does; HNSW with a low ef loses recall on a clustered set, and the proof,
read back from the database, says an index answered; halfvec / int8 lose a little; a
small Qdrant collection under Qdrant's own thresholds is searched exactly and the proof
says so; a recipe runs end to end through both; a database killed mid-run is exit 2.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest
import yaml

from evalq.app.cli import main
from evalq.core.errors import InputError
from evalq.core.ranking import Ranking
from evalq.recipe.schema import load_recipe
from evalq.retrieve import pg_server
from evalq.retrieve.kinds import Documents, KindOptions, recall_at
from evalq.retrieve.pg_server import check_version
from evalq.retrieve.pgvector_kind import PgvectorIndex
from evalq.retrieve.pgvector_options import PgvectorSearch
from evalq.retrieve.qdrant_kind import SearchParams
from evalq.retrieve.registry import INDEX_KINDS
from support import recipes
from support.clustered import clustered

K = 10


DOCS, QUERIES = clustered(2000, 32, 40, seed=0)


def _pg(**options: Any) -> KindOptions:
    return INDEX_KINDS.parse({"kind": "pgvector", "allow_root": True, **options}, "vectors",
                             "faiss")


def _qdrant(root: Path, name: str, **options: Any) -> KindOptions:
    """Options of a shard made (and removed) in the session's Qdrant folder."""
    return INDEX_KINDS.parse({"kind": "qdrant", "path": str(root), **options},
                             "vectors", "faiss")


def _run(options: KindOptions, params: Any = None) -> tuple[Ranking, Any, Any]:
    index = INDEX_KINDS.build(options, DOCS, where="candidates.x.index")
    try:
        return index.search(QUERIES, K, params), index.proof(), index.stats()
    finally:
        index.close()


def _same_as_exact(ranking: Ranking, exact: Ranking) -> None:
    """Scores agree to float32 rounding, and where the k-th score is distinct from the
    next the top-k id sets are the same."""
    np.testing.assert_allclose(ranking.scores[:, :K], exact.scores[:, :K], atol=1e-5)
    for row in range(len(exact.query_ids)):
        assert set(ranking.indices[row, :K]) == set(exact.indices[row, :K]), row


# -- options: the fast tier ---------------------------------------------------------------

@pytest.mark.parametrize(("options", "needle"), [
    ({"index": "ivfflat", "m": 8}, "m apply to index: hnsw"),
    ({"index": "hnsw", "probes": 4}, "probes apply to index: ivfflat"),
    ({"rerank": 40}, "rerank applies to vector_type: bit"),
    ({"vector_type": "bit", "rerank": 100}, "exceeds ef_search 40"),
    ({"m": 16, "ef_construction": 20}, r"ef_construction >= 2 \* m"),
    ({"dsn": "postgresql://x", "data_dir": "/tmp/x"}, "exclude each other"),
    ({"vector_type": "float8"}, "vector_type"),
    ({"ef_search": 2000}, "ef_search"),
    ({"index": "none", "iterative_scan": "strict_order"}, "iterative_scan applies"),
    ({"data_dir": __file__}, "is a file"),  # was planned, and failed in the run
])
def test_pgvector_options_pgvector_refuses_are_refused_when_read(options: dict[str, Any],
                                                                 needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        _pg(**options)


def test_qdrant_options_are_qdrants_and_refused_when_wrong(tmp_path: Path) -> None:
    opts = _qdrant(tmp_path, "s", hnsw_config={"m": 8, "ef_construct": 32},
                   quantization_config={"scalar": {"type": "int8"}},
                   search_params={"hnsw_ef": 16, "quantization": {"oversampling": 2.0,
                                                                  "rescore": True}})
    assert opts.search_options() == SearchParams.model_validate(
        {"hnsw_ef": 16, "quantization": {"oversampling": 2.0, "rescore": True}})
    for bad in ({"quantization_config": {"scalar": {}, "binary": {}}},
                {"hnsw_config": {"ef": 8}},
                {"search_params": {"quantization": {"oversampling": 0.5}}}):
        with pytest.raises(ValueError):
            _qdrant(tmp_path, "s", **bad)
    # every swept hnsw_ef would be the same exhaustive search
    with pytest.raises(ValueError, match="same search"):
        _qdrant(tmp_path, "s", search_params={"exact": True}, sweep={"hnsw_ef": [8, 64]})


def test_the_embedded_server_as_root_needs_allow_root(monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.delenv(pg_server.ALLOW_ROOT_ENV, raising=False)
    with pytest.raises(InputError) as err:
        pg_server.embedded(None, allow_root=False, where="candidates.pg.index")
    assert err.value.field == "candidates.pg.index.allow_root"
    assert "system user 'pgserver'" in str(err.value) and "dsn:" in str(err.value)
    assert pg_server.ALLOW_ROOT_ENV in str(err.value)


def test_a_pgvector_too_old_for_the_options_is_refused_naming_the_server() -> None:
    where, label = "candidates.pg.index", "the PostgreSQL at postgresql://h/db"
    check_version("0.7.4", _pg(vector_type="halfvec"), label, where)  # old enough
    for version, options, field in (("0.6.2", {"vector_type": "halfvec"}, "vector_type"),
                                     ("0.6.2", {"vector_type": "bit"}, "vector_type"),
                                     ("0.7.4", {"iterative_scan": "strict_order"},
                                      "iterative_scan")):
        with pytest.raises(InputError) as err:
            check_version(version, _pg(**options), label, where)
        assert err.value.field == f"{where}.{field}" and label in str(err.value)
        assert f"pgvector {version}" in str(err.value)


def test_the_recipe_reads_both_kinds(tmp_path: Path) -> None:
    recipe = load_recipe(recipes.recipe("vdb", cache=tmp_path, candidates=[
        {"name": "pg", "index": {"kind": "pgvector", "vector_type": "halfvec",
                                 "ef_search": 64}},
        {"name": "qd", "index": {"kind": "qdrant", "search_params": {"hnsw_ef": 32}}}]))
    pg_opts, qd_opts = (c.index for c in recipe.candidates)
    assert pg_opts.kind == "pgvector" and pg_opts.search_options() == PgvectorSearch(
        ef_search=64)
    assert qd_opts.kind == "qdrant" and qd_opts.search_options().hnsw_ef == 32
    assert pg_opts.record()["dsn"] is None
    assert "secret" not in json.dumps(_pg(dsn="postgresql://u:secret@h/db").record())


# -- pgvector, on the session's embedded server -----------------------------------------

@pytest.mark.server
def test_pgvector_without_an_index_ranks_as_exact_faiss(pg: pg_server.Database,
                                                        exact: Ranking) -> None:
    ranking, proof, stats = _run(_pg(index="none"))
    _same_as_exact(ranking, exact)
    assert proof.exact and proof.method == "Seq Scan" and not proof.params["fell_back"]
    assert stats.bytes >= stats.detail["table_bytes"] > 0 and stats.detail["index_bytes"] == 0


@pytest.mark.server
def test_pgvector_by_dsn_uses_that_database(pg: pg_server.Database, exact: Ranking) -> None:
    """A team's own database: here the session's server, reached by its connection
    string only (no embedded server of its own is started)."""
    ranking, proof, stats = _run(_pg(dsn=pg.dsn, index="ivfflat", lists=4, probes=4))
    _same_as_exact(ranking, exact)  # every list probed: the exact top 10
    assert proof.method == "Index Scan" and proof.params["ivfflat.probes"] == "4"
    assert stats.detail["database"].startswith("the PostgreSQL at postgresql://")


@pytest.mark.server
def test_pgvector_hnsw_with_a_low_ef_misses_and_proves_its_index(pg: pg_server.Database,
                                                                 exact: Ranking) -> None:
    index = INDEX_KINDS.build(_pg(m=4, ef_construction=8, ef_search=10), DOCS, where="x")
    try:
        low = recall_at(index.search(QUERIES, K), exact, K).mean()
        low_proof = index.proof()
        high = recall_at(index.search(QUERIES, K, PgvectorSearch(ef_search=400)), exact,
                         K).mean()
        high_proof, stats = index.proof(), index.stats()
        assert isinstance(index, PgvectorIndex)
        name = index.index_name
    finally:
        index.close()
    assert 0.2 < low < 1.0 and high > low
    assert not low_proof.exact and low_proof.method == "Index Scan"
    assert low_proof.params["index_name"] == name and low_proof.params["hnsw.ef_search"] == "10"
    assert high_proof.params["hnsw.ef_search"] == "400"  # read back from the server
    assert stats.detail["index_bytes"] > 0 and stats.bytes > stats.detail["table_bytes"]
    assert stats.build_s > 0 and stats.detail["pgvector"] >= "0.7"


@pytest.mark.server
def test_a_planner_that_chose_a_seq_scan_is_recorded_as_exact(pg: pg_server.Database
                                                              ) -> None:
    """With the planner free to choose (enable_seqscan: true), a 20-row table is read by
    a Seq Scan past its HNSW index: not an index run, and the proof says so."""
    docs = Documents(DOCS.ids[:20], DOCS.vectors[:20])
    for vector_type, extra in (("vector", {}), ("bit", {"rerank": 10})):
        index = INDEX_KINDS.build(_pg(enable_seqscan=True, vector_type=vector_type, **extra),
                                  docs, where="x")
        try:
            index.search(QUERIES, K)
            proof = index.proof()
        finally:
            index.close()
        assert proof.exact and proof.method == "Seq Scan", proof
        assert proof.params["fell_back"] and "index_name" not in proof.params


@pytest.mark.server
def test_pgvector_returns_at_most_ef_search_rows_unless_it_scans_on(
        pg: pg_server.Database) -> None:
    index = INDEX_KINDS.build(_pg(ef_search=10), DOCS, where="x")
    try:
        short = index.search(QUERIES, 30)
        short_stats = index.stats()
        full = index.search(QUERIES, 30, PgvectorSearch(ef_search=10,
                                                        iterative_scan="strict_order"))
        proof, full_stats = index.proof(), index.stats()
    finally:
        index.close()
    assert short_stats.detail["missing_slots"] > 0 == full_stats.detail["missing_slots"]
    assert (short.indices[:, 10:] == -1).all() and (full.indices >= 0).all()
    assert proof.params["hnsw.iterative_scan"] == "strict_order"
    assert proof.method == "Index Scan"


@pytest.mark.server
def test_pgvector_halfvec_and_bit_lose_what_they_should(pg: pg_server.Database,
                                                        exact: Ranking) -> None:
    half, half_proof, half_stats = _run(_pg(index="none", vector_type="halfvec"))
    full_stats = _run(_pg(index="none"))[2]
    assert half_proof.exact and recall_at(half, exact, K).mean() >= 0.9
    assert 0 < np.abs(half.scores[:, :K] - exact.scores[:, :K]).max() < 1e-2
    assert half_stats.detail["table_bytes"] < full_stats.detail["table_bytes"]
    bits, bits_proof, _ = _run(_pg(vector_type="bit", ef_search=200))
    reranked, _, _ = _run(_pg(vector_type="bit", ef_search=200, rerank=200))
    assert bits_proof.method == "Index Scan"
    assert recall_at(bits, exact, K).mean() < recall_at(reranked, exact, K).mean()


@pytest.mark.server
def test_a_dead_database_is_exit_2_naming_it(pg_folder: Path) -> None:
    options = _pg(index="none", data_dir=str(pg_folder / "pg"))
    index = INDEX_KINDS.build(options, DOCS, where="candidates.pg.index")
    try:
        db = index.db
        _kill_server(Path(db.data_dir))
        with pytest.raises(InputError) as err:
            index.search(QUERIES, K)
    finally:
        index.close()
        pg_server.stop_embedded(Path(db.data_dir))
    text = str(err.value)
    assert f"embedded PostgreSQL in {db.data_dir}" in text and "rerun" in text
    assert err.value.field == "candidates.pg.index"


def _kill_server(data_dir: Path) -> None:
    """SIGKILL the server of ``data_dir``: its postmaster and every backend (a backend
    alone outlives its postmaster for a while and may still answer)."""
    postmaster = psutil.Process(int((data_dir / "postmaster.pid").read_text().split()[0]))
    for process in (postmaster, *postmaster.children(recursive=True)):
        with contextlib.suppress(psutil.NoSuchProcess):  # gone with its parent
            process.send_signal(signal.SIGKILL)


# -- Qdrant, in-process -------------------------------------------------------------------

@pytest.mark.server
def test_qdrant_exact_ranks_as_exact_faiss(qdrant_root: Path, exact: Ranking) -> None:
    ranking, proof, _ = _run(_qdrant(qdrant_root, "exact", search_params={"exact": True}))
    _same_as_exact(ranking, exact)
    assert proof.exact and proof.method == "full scan"


@pytest.mark.server
def test_qdrant_hnsw_with_a_low_ef_misses_and_proves_its_index(qdrant_root: Path,
                                                               exact: Ranking) -> None:
    ranking, proof, stats = _run(_qdrant(
        qdrant_root, "hnsw", hnsw_config={"m": 4, "ef_construct": 8},
        search_params={"hnsw_ef": 10}))
    assert 0.2 < recall_at(ranking, exact, K).mean() < 1.0
    assert not proof.exact and proof.method == "HNSW"
    assert proof.params["indexed_vectors"] == proof.params["points"] == len(DOCS.ids)
    assert stats.bytes > 0 and stats.detail["optimize_s"] > 0


@pytest.mark.server
def test_qdrants_own_thresholds_leave_a_small_collection_exact(qdrant_root: Path,
                                                               exact: Ranking) -> None:
    """The trap: with Qdrant's default thresholds (10000 KB) nothing is indexed and every
    search is exhaustive, whatever hnsw_ef says; the proof must say so."""
    ranking, proof, _ = _run(_qdrant(
        qdrant_root, "trap", hnsw_config={"m": 4, "ef_construct": 8,
                                          "full_scan_threshold": 10000},
        optimizers_config={"indexing_threshold": 10000}, search_params={"hnsw_ef": 10}))
    assert proof.exact and proof.method == "full scan"
    assert proof.params["indexed_vectors"] == 0
    _same_as_exact(ranking, exact)


@pytest.mark.server
def test_qdrant_int8_loses_a_little_and_oversampling_wins_it_back(qdrant_root: Path,
                                                                  exact: Ranking) -> None:
    options = _qdrant(qdrant_root, "int8", hnsw_config={"m": 16, "ef_construct": 200},
                      quantization_config={"scalar": {"type": "int8"}},
                      search_params={"hnsw_ef": 200})
    index = INDEX_KINDS.build(options, DOCS, where="x")
    try:
        plain = index.search(QUERIES, K, SearchParams.model_validate(
            {"hnsw_ef": 200, "quantization": {"rescore": False}}))
        rescored = index.search(QUERIES, K, SearchParams.model_validate(
            {"hnsw_ef": 200, "quantization": {"rescore": True, "oversampling": 4.0}}))
        proof = index.proof()
    finally:
        index.close()
    assert np.abs(plain.scores[:, :K] - exact.scores[:, :K]).max() > 0
    assert recall_at(plain, exact, K).mean() >= 0.6
    assert recall_at(rescored, exact, K).mean() >= recall_at(plain, exact, K).mean()
    assert proof.method == "HNSW over scalar codes" and not proof.exact


# -- a recipe, end to end -----------------------------------------------------------------

def _recipe(tmp_path: Path, **pg_extra: Any) -> Path:
    data = recipes.recipe(
        "vdb", cache=tmp_path / "cache", queries=12, docs=40,
        candidates=[{"name": "fp32-pg", "index": {"kind": "pgvector", "allow_root": True,
                                                  "m": 8, "ef_construction": 32,
                                                  **pg_extra}},
                    {"name": "fp32-qdrant", "index": {"kind": "qdrant"}},
                    # both losses: a narrower model (Matryoshka) in a binary index
                    {"name": "d64-pg-bit", "vectors": {"dims": 64},
                     "index": {"kind": "pgvector", "allow_root": True, "vector_type": "bit",
                               "ef_search": 40, **pg_extra}}],
        metrics=["nDCG@10"], reference_metrics=["overlap@10"],
        gates=[recipes.gate("nDCG@10", "qrels", max_drop="5%"),
               recipes.gate("overlap@10", "reference", min=0.5, loss="model"),
               recipes.gate("overlap@10", "reference", min=0.5, loss="index")],
        resamples=200)
    return recipes.write(tmp_path / "vdb.yaml", data)


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.server
def test_a_recipe_runs_through_pgvector_and_qdrant(pg: pg_server.Database,
                                                   tmp_path: Path) -> None:
    assert main(["run", str(_recipe(tmp_path)), "-o", str(tmp_path / "out")]) in (0, 1)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    pg_entry = manifest["variants"]["fp32-pg"]["datasets"]["pydocs"]["index"]
    assert pg_entry["kind"] == "pgvector" and pg_entry["m"] == 8
    assert pg_entry["proof"]["method"] == "Index Scan" and not pg_entry["proof"]["exact"]
    assert pg_entry["proof"]["params"]["index_name"].startswith("evalq_")
    assert pg_entry["index_bytes"] > 0 and "recall@10" in pg_entry
    qd_entry = manifest["variants"]["fp32-qdrant"]["datasets"]["pydocs"]["index"]
    assert qd_entry["kind"] == "qdrant" and qd_entry["proof"]["method"] == "HNSW"
    assert qd_entry["proof"]["params"]["indexed_vectors"] == 40
    # the same vectors, exact settings aside: a 40-document HNSW finds the exact top 10
    assert pg_entry["recall@10"] == pytest.approx(1.0) == qd_entry["recall@10"]
    _three_losses(tmp_path / "out")


def _three_losses(out: Path) -> None:
    """Model, index and end-to-end loss in the summary, each gated on its own pair."""
    summary = json.loads((out / "summary.json").read_text())["datasets"]["pydocs"]["variants"]
    # fp32 in a database: no model loss, the index's only (none at 40 documents)
    fp32 = summary["fp32-pg"]["losses"]
    assert fp32["nDCG@10"]["model"] == pytest.approx(0.0, abs=1e-9)
    assert fp32["overlap@10"]["model"] == pytest.approx(0.0, abs=1e-9)
    assert fp32["overlap@10"]["index"] == pytest.approx(0.0, abs=1e-9)
    # 64 of 384 dimensions, then 64 bits: each step loses agreement of its own
    both = summary["d64-pg-bit"]["losses"]
    assert both["overlap@10"]["model"] > 0 and both["overlap@10"]["index"] > 0
    assert both["overlap@10"]["end_to_end"] > 0
    assert both["nDCG@10"]["model"] + both["nDCG@10"]["index"] == pytest.approx(
        both["nDCG@10"]["end_to_end"], abs=1e-9)
    gates = {c["gate"].split(" on ")[0] for c in summary["d64-pg-bit"]["gate"]["checks"]}
    assert gates == {"nDCG@10 vs qrels max_drop 5%", "model loss: overlap@10 vs reference min 0.5",
                     "index loss: overlap@10 vs reference min 0.5"}


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.server
def test_a_database_killed_mid_run_is_exit_2_and_the_rerun_resumes(
        tmp_path: Path, pg_folder: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Killed between the last candidate's ingest and its search: exit 2 naming the
    database, the candidate's index and the fix; the earlier candidates' files stay, and
    the rerun finds both tables complete in the kept data folder and reuses them."""
    data_dir, out = pg_folder / "pgdata", tmp_path / "out"
    search = PgvectorIndex.search

    def killed_before_bit(self: PgvectorIndex, *args: Any, **kwargs: Any) -> Ranking:
        if self.options.vector_type == "bit":  # type: ignore[attr-defined]
            _kill_server(data_dir)
        return search(self, *args, **kwargs)

    monkeypatch.setattr(PgvectorIndex, "search", killed_before_bit)
    recipe = _recipe(tmp_path, data_dir=str(data_dir))
    try:
        code = main(["run", str(recipe), "-o", str(out)])
        err = capsys.readouterr().err
        assert code == 2, err
        assert f"embedded PostgreSQL in {data_dir.resolve()}" in err and "Traceback" not in err
        assert "field 'candidates.d64-pg-bit.index'" in err and "rerun" in err
        assert "reuses them (or resumes an interrupted one)" in err
        for done in ("fp32", "fp32-pg", "fp32-qdrant"):  # finished work is kept
            assert (out / "per_query" / "pydocs" / f"{done}.jsonl").is_file(), done
        stopped = json.loads((out / "manifest.json").read_text())
        assert stopped["status"] == "failed" and "d64-pg-bit" in stopped["error"]
        monkeypatch.setattr(PgvectorIndex, "search", search)
        assert main(["run", str(recipe), "-o", str(tmp_path / "again")]) in (0, 1)
    finally:
        pg_server.stop_embedded(data_dir.resolve())
    variants = json.loads((tmp_path / "again" / "manifest.json").read_text())["variants"]
    for name in ("fp32-pg", "d64-pg-bit"):
        entry = variants[name]["datasets"]["pydocs"]["index"]
        assert entry["reused"] and entry["rows_loaded"] == 0, name


def test_the_docs_recipe_is_read_as_written() -> None:
    """docs/vector-databases.md's recipe parses, each candidate through its kind."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "vector-databases.md").read_text()
    block = page.split("```yaml\n", 1)[1].split("```", 1)[0]
    recipe = load_recipe(yaml.safe_load(block))
    kinds = [c.index.kind for c in recipe.candidates]
    assert kinds == ["pgvector"] * 3 + ["qdrant"] * 3
    assert recipe.candidates[2].index.search_options() == PgvectorSearch(ef_search=200,
                                                                          rerank=100)


_HOLDS_A_SERVER = """
import signal, sys, time
from evalq.core import failure
from evalq.retrieve import pg_server
# A process started in the background by a non-interactive shell (a CI runner's job,
# 'cmd &') inherits SIGINT ignored, and Python then keeps it ignored: Ctrl-C is what an
# interactive evalq gets, so the stand-in takes Python's own handler back.
signal.signal(signal.SIGINT, signal.default_int_handler)
failure.terminate_as_interrupt()  # what the CLI does: SIGTERM unwinds like Ctrl-C
pg_server.embedded(sys.argv[1], allow_root=True, where="t")
try:
    print("ready", flush=True)  # inside: the signal may come at once
    time.sleep(600)
except KeyboardInterrupt:
    sys.exit(143)
"""


@pytest.mark.process
@pytest.mark.server
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_the_embedded_server_stops_with_an_interrupted_evalq(pg_folder: Path,
                                                             sig: signal.Signals) -> None:
    data_dir = pg_folder / "pg"
    child = subprocess.Popen([sys.executable, "-c", _HOLDS_A_SERVER, str(data_dir)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        postmaster = psutil.Process(int((data_dir / "postmaster.pid").read_text().split()[0]))
        child.send_signal(sig)
        code = child.wait(timeout=120)
        assert code in (143, 130, -sig), child.stderr.read() if child.stderr else code
    finally:
        if child.poll() is None:
            child.kill()
    with contextlib.suppress(psutil.NoSuchProcess):
        postmaster.wait(timeout=60)
    assert not postmaster.is_running() or postmaster.status() == psutil.STATUS_ZOMBIE
