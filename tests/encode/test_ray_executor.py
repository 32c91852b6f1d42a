"""``executor: ray`` on a local Ray cluster (``ray.init(num_cpus=2)``, shut down at the end).

Few and small on purpose (a pydocs slice, one candidate-free recipe): Ray and local runs
give identical metrics; a killed actor is restarted by Ray and the metrics stay the same;
an interrupted Ray run resumes from its finished chunks, and local and Ray runs share
the cache; without Ray installed, ``executor: ray`` exits 2 with the install line.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from evalq.app.api import run_recipe_file
from evalq.app.cli import main
from evalq.encode.cache import EmbeddingCache
from support import recipes

pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.model]

ray = pytest.importorskip("ray", reason="the ray extra is part of `make test`")

def _data(cache: Path, executor: str = "ray") -> dict[str, Any]:
    return recipes.recipe(
        "ray-e2e", cache=cache, queries=30, docs=120, cache_chunk=16, batch_tokens=2048,
        parity={"texts": 8},
        executor={"type": executor, "replicas": 2, "cpus_per_replica": 1},
        metrics=["nDCG@10", "R@100"], reference_metrics=["overlap@10"], resamples=200)


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
                                       "PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
    try:
        yield
    finally:
        ray.shutdown()


def _recipe(folder: Path, cache: Path, executor: str = "ray") -> Path:
    return recipes.write(folder / "r.yaml", _data(cache, executor))


def _per_query(out: Path) -> str:
    return (out / "per_query" / "pydocs" / "fp32.jsonl").read_text()


def _manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text())


@pytest.fixture(scope="module")
def local_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("local")
    run_recipe_file(_recipe(base, base / "cache", "local"), output=base / "out",
                    progress=False)
    return base / "out"


def test_ray_and_local_give_identical_metrics_and_share_the_cache(
        cluster, local_run, tmp_path) -> None:
    recipe = _recipe(tmp_path, tmp_path / "cache")
    run_recipe_file(recipe, output=tmp_path / "ray", progress=False)
    assert _per_query(tmp_path / "ray") == _per_query(local_run)  # every value, bit for bit
    manifest = _manifest(tmp_path / "ray")
    assert manifest["executor"]["type"] == "ray" and manifest["executor"]["ray_version"]
    assert manifest["executor"]["nodes"] and manifest["executor"]["cluster_resources"]["CPU"]
    ray_stats = manifest["variants"]["fp32"]["timings"]["ray"]
    assert ray_stats["chunks_computed"] > 0 and ray_stats["chunks_cached"] == 0
    # every chunk the runner then looked up was a cache hit: nothing encoded locally
    enc = manifest["variants"]["fp32"]["datasets"]["pydocs"]["encode"]
    assert enc["documents"]["n_computed"] == 0 and enc["queries"]["n_computed"] == 0
    # a local run on the Ray run's cache computes nothing either (shared keys)
    assert main(["run", str(recipe), "-o", str(tmp_path / "again"), "--executor",
                 "local"]) == 0
    again = _manifest(tmp_path / "again")["variants"]["fp32"]["datasets"]["pydocs"]["encode"]
    assert again["documents"]["n_computed"] == 0


def test_streamed_corpus_on_ray_matches_local_and_shares_the_cache(cluster, tmp_path) -> None:
    """A dataset with ``stream:``: each block's missing chunks are computed on the actors,
    and a local run on that cache computes nothing and gives the same values."""
    from evalq.data.manifest import load_dataset
    from support.trec_files import write_trec_copy

    ds = load_dataset("pydocs", max_queries=10, max_docs=40)
    data = write_trec_copy(ds, tmp_path / "data")
    streamed = _data(tmp_path / "cache")
    del streamed["max_queries"], streamed["max_docs"]
    streamed["datasets"] = [{"name": "sd", "source": "trec",
                             "stream": {"block_rows": 20, "shard_rows": 24},
                             "trec": {"corpus": f"{data}/corpus.jsonl",
                                      "queries": f"{data}/queries.jsonl",
                                      "qrels": f"{data}/qrels.tsv"}}]
    recipe = recipes.write(tmp_path / "r.yaml", streamed)
    run_recipe_file(recipe, output=tmp_path / "ray", progress=False)
    ray_stats = _manifest(tmp_path / "ray")["variants"]["fp32"]["timings"]["ray"]
    assert ray_stats["texts_computed"] >= 50  # parity texts, 10 queries, 40 documents
    enc = _manifest(tmp_path / "ray")["variants"]["fp32"]["datasets"]["sd"]
    assert enc["encode"]["documents"]["n_computed"] == 0 and enc["stream"]["blocks"] == 2
    assert main(["run", str(recipe), "-o", str(tmp_path / "local"), "--executor",
                 "local"]) == 0
    local = _manifest(tmp_path / "local")["variants"]["fp32"]["datasets"]["sd"]["encode"]
    assert local["documents"]["n_computed"] == 0
    assert (tmp_path / "ray" / "per_query" / "sd" / "fp32.jsonl").read_text() == \
        (tmp_path / "local" / "per_query" / "sd" / "fp32.jsonl").read_text()


def test_killed_actor_is_retried_and_metrics_stay_identical(
        cluster, local_run, tmp_path) -> None:
    """Kill one encoding actor's process (SIGKILL) once the first chunk has landed.

    Actors are found by their process title (``ray::MapWorker(MapBatches(_EncodeActor))``),
    which needs no dashboard."""
    import psutil

    cache_root = tmp_path / "cache" / "embeddings"
    killed: list[int] = []

    def kill_one() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not killed:
            if EmbeddingCache(cache_root).size().files >= 1:
                for proc in psutil.process_iter(["pid", "cmdline"]):
                    title = " ".join(proc.info["cmdline"] or [])
                    if "_EncodeActor" in title:
                        os.kill(proc.info["pid"], signal.SIGKILL)
                        killed.append(proc.info["pid"])
                        return
            time.sleep(0.2)

    killer = threading.Thread(target=kill_one, daemon=True)
    killer.start()
    run_recipe_file(_recipe(tmp_path, tmp_path / "cache"), output=tmp_path / "out",
                    progress=False)
    killer.join(timeout=5)
    assert killed, "no encoding actor was found alive to kill"
    assert _per_query(tmp_path / "out") == _per_query(local_run)


def test_interrupted_ray_run_resumes_from_finished_chunks(
        cluster, local_run, tmp_path, monkeypatch) -> None:
    """Ctrl-C in the driver after three chunks were stored; the rerun computes only the
    rest (on Ray), and the metrics match an uninterrupted run."""
    recipe = _recipe(tmp_path, tmp_path / "cache")
    real_put = EmbeddingCache.put
    stored = []

    def put_then_interrupt(self, key, array):
        if len(stored) == 3:
            raise KeyboardInterrupt
        stored.append(key)
        real_put(self, key, array)

    monkeypatch.setattr(EmbeddingCache, "put", put_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        run_recipe_file(recipe, output=tmp_path / "out", progress=False)
    assert _manifest(tmp_path / "out")["status"] == "interrupted"
    monkeypatch.setattr(EmbeddingCache, "put", real_put)
    run_recipe_file(recipe, output=tmp_path / "out", progress=False)
    stats = _manifest(tmp_path / "out")["variants"]["fp32"]["timings"]["ray"]
    assert stats["chunks_cached"] == 3
    assert stats["chunks_computed"] == stats["chunks_planned"] - 3
    assert _per_query(tmp_path / "out") == _per_query(local_run)


def test_executor_ray_without_ray_installed_exits_2(tmp_path, monkeypatch, capsys) -> None:
    """Ray's absence is simulated: ``sys.modules['ray'] = None`` makes ``import ray``
    raise ImportError, exactly what a machine without the extra sees."""
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.setitem(sys.modules, "ray.data", None)
    recipe = _recipe(tmp_path, tmp_path / "cache", "local")
    assert main(["run", str(recipe), "--executor", "ray", "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "pip install 'evalq[ray]'" in err and str(recipe) in err
    ray_recipe = _recipe(tmp_path / "r", tmp_path / "cache")
    assert main(["run", str(ray_recipe), "-o", str(tmp_path / "o")]) == 2
    assert main(["run", str(recipe), "--address", "auto", "-o", str(tmp_path / "o")]) == 2
