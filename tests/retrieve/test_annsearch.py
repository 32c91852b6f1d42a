"""ANN indexes (FAISS index_factory) judged against exact search of the same vectors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalq.app.api import run_recipe_file
from evalq.app.cli import main
from evalq.core.errors import InputError
from evalq.retrieve.ann import FaissOptions, ann_search
from evalq.retrieve.kinds import recall_at
from evalq.retrieve.search import search
from support import recipes


@pytest.fixture(scope="module")
def clustered() -> tuple[np.ndarray, np.ndarray, list[str], list[str]]:
    """Normalized vectors around 40 centres: the structure IVF and HNSW are built for."""
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((40, 64))
    docs = centres[rng.integers(40, size=3000)] + 0.35 * rng.standard_normal((3000, 64))
    queries = centres[rng.integers(40, size=80)] + 0.35 * rng.standard_normal((80, 64))
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    return (docs.astype(np.float32), queries.astype(np.float32),
            [f"d{i:05d}" for i in range(3000)], [f"q{i}" for i in range(80)])


def test_flat_factory_is_the_exact_search(clustered) -> None:
    docs, queries, ids, qids = clustered
    ann = ann_search(queries, docs, ids, qids, 20, FaissOptions(factory="Flat"))
    exact = search(queries, docs, ids, qids, 20)
    np.testing.assert_array_equal(ann.ranking.indices, exact.indices)
    assert recall_at(ann.ranking, exact, 10).min() == 1.0
    assert ann.cost.bytes >= docs.nbytes and ann.cost.train_rows == 0


def test_hnsw_and_ivfpq_record_cost_and_recall(clustered) -> None:
    docs, queries, ids, qids = clustered
    exact = search(queries, docs, ids, qids, 20)
    hnsw = ann_search(queries, docs, ids, qids, 20,
                      FaissOptions(factory="HNSW32", search={"efSearch": 64}))
    # IVF + 8-bit scalar codes (PQ training is slow on this 2-core machine: see docs/benchmarks.md)
    pq = ann_search(queries, docs, ids, qids, 20,
                    FaissOptions(factory="IVF32,SQ8", train_size=2000, search={"nprobe": 2}))
    r_hnsw = recall_at(hnsw.ranking, exact, 10).mean()
    r_pq = recall_at(pq.ranking, exact, 10).mean()
    assert r_hnsw > 0.9
    assert 0.05 < r_pq < 1.0  # 2 of 32 lists probed: real neighbours are missed
    assert pq.cost.train_rows == 2000 and pq.cost.search_params == "nprobe=2"
    assert pq.cost.bytes_per_vector < docs.shape[1] * 4 / 2  # 1 byte a dimension + id
    # rows come back in trec_eval order: score desc, then id desc
    for row in range(len(qids)):
        sc = hnsw.ranking.scores[row]
        assert (np.diff(sc[~np.isnan(sc)]) <= 0).all()
    # deterministic builds: the same spec judges the same graph twice
    again = ann_search(queries, docs, ids, qids, 20,
                       FaissOptions(factory="HNSW32", search={"efSearch": 64}))
    np.testing.assert_array_equal(again.ranking.indices, hnsw.ranking.indices)


def test_short_ivf_lists_leave_empty_slots(clustered) -> None:
    docs, queries, ids, qids = clustered
    ann = ann_search(queries, docs[:400], ids[:400], qids, 100,
                     FaissOptions(factory="IVF64,Flat", search={"nprobe": 1}))
    assert ann.cost.missing_slots > 0
    empty = ann.ranking.indices < 0
    assert np.isnan(ann.ranking.scores[empty]).all()
    # empty slots come last in each row
    assert all((np.diff(r.astype(int)) >= 0).all() for r in empty)


@pytest.mark.parametrize(("spec", "field"), [
    (FaissOptions(factory="IVF4096,PQ16"), "index.train_size"),   # 4096 lists, 500 points
    (FaissOptions(factory="PQ7"), "index.factory"),               # 64 not divisible by 7
    (FaissOptions(factory="HNSW32", search={"nprobe": 8}), "index.search"),
])
def test_recipe_mistakes_are_input_errors(clustered, spec, field) -> None:
    docs, queries, ids, qids = clustered
    with pytest.raises(InputError) as err:
        ann_search(queries, docs[:500], ids[:500], qids, 10, spec)
    assert err.value.field == field and err.value.fix


HNSW16 = {"factory": "HNSW16", "search": {"efSearch": 16}}


def _recipe(cache: Path) -> dict[str, Any]:
    return recipes.recipe(
        "ann", cache=cache, queries=30, docs=200,
        candidates=[{"name": "fp32-hnsw", "index": HNSW16},
                    {"name": "fp32-ivfsq8", "index": {"factory": "IVF8,SQ8", "train_size": 200,
                                                      "search": {"nprobe": 2}}},
                    {**recipes.DYN_INT8, "name": "dyn-int8-hnsw", "index": HNSW16}],
        metrics=["nDCG@10", "R@100"], reference_metrics=["overlap@10", "cosine"],
        gates=[recipes.gate("nDCG@10", "qrels", max_drop="5%")], resamples=500)


@pytest.fixture(scope="module")
def ann_run(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("ann")
    recipe = recipes.write(base / "ann.yaml", _recipe(base / "cache"))
    outcome = run_recipe_file(recipe, output=base / "out", progress=False)
    manifest = json.loads((base / "out" / "manifest.json").read_text())
    return outcome, manifest, base


@pytest.mark.slow
@pytest.mark.model
def test_recipe_ann_variants_record_recall_and_loss_split(ann_run) -> None:
    outcome, manifest, base = ann_run
    for name in ("fp32-hnsw", "fp32-ivfsq8", "dyn-int8-hnsw"):
        index = manifest["variants"][name]["datasets"]["pydocs"]["index"]
        assert index["type"] == "ann" and index["factory"]
        assert 0 <= index["recall@10"] <= 1 and index["bytes"] > 0 and index["build_s"] >= 0
        assert index["queries_per_s"] > 0
        loss = index["loss"]["nDCG@10"]
        # the two losses add up to the variant's whole drop against the reference
        assert loss["quantization_loss"] + loss["index_loss"] == pytest.approx(
            loss["reference"] - loss["ann"])
        judged = outcome.summary["datasets"]["pydocs"]["variants"][name]["metrics"]["nDCG@10"]
        assert judged["value"] == pytest.approx(loss["ann"])  # the ANN run is what is judged
        assert (base / "out" / "runs" / "pydocs" / f"{name}.exact.trec").is_file()
    same_vectors = manifest["variants"]["fp32-hnsw"]["datasets"]["pydocs"]["index"]["loss"]
    # fp32 + index: the model loses nothing, so the whole loss is the index's
    assert same_vectors["nDCG@10"]["quantization_loss"] == pytest.approx(0.0, abs=1e-12)
    ivfsq = manifest["variants"]["fp32-ivfsq8"]["datasets"]["pydocs"]["index"]
    assert ivfsq["recall@10"] < 1.0 and ivfsq["search"] == {"nprobe": 2}
    dyn = manifest["variants"]["dyn-int8-hnsw"]["datasets"]["pydocs"]["index"]["loss"]
    assert dyn["nDCG@10"]["quantization_loss"] != 0.0
    assert "overlap@10" in dyn and "cosine" not in dyn


def test_recipe_refuses_index_on_reference_and_with_vector_quantization(tmp_path: Path) -> None:
    bad = _recipe(tmp_path)
    bad["reference"]["index"] = {"factory": "HNSW32"}
    assert main(["validate", str(recipes.write(tmp_path / "a.yaml", bad))]) == 2
    bad = _recipe(tmp_path)
    bad["candidates"][0] = {"name": "fp32-hnsw", "vectors": {"quantize": "int8"}, "index": HNSW16}
    assert main(["validate", str(recipes.write(tmp_path / "b.yaml", bad))]) == 2
    bad = _recipe(tmp_path)
    for hnsw in (bad["candidates"][0], bad["candidates"][2]):
        hnsw["index"]["search"]["nprob"] = 2
    assert main(["validate", str(recipes.write(tmp_path / "c.yaml", bad))]) == 2
