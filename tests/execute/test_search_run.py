"""A recipe's search through `evalq run` with the real MiniLM (issue 31): 2 weight formats
× 2 vector precisions × 2 Matryoshka widths on a pydocs slice.

Checks what the search promises: every weight variant encoded once (counted at the
encoding call), a combination's nDCG@10 is what trec_eval's implementation gives on its
written run file, the marks are what :mod:`evalq.decide.search` gives on the written
per-query values, and the recommendation is certified and the cheapest certified.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest

from evalq.app.api import run_recipe_file
from evalq.app.cli import main
from evalq.app.gate_command import stored_sections_of
from evalq.core.gates import GateSpec
from evalq.decide.gate import decide_gates
from evalq.decide.search import Point, holm, split_queries, survivors
from evalq.engines.inprocess import InProcessEncoder
from evalq.execute import evaluate
from evalq.execute.regate import regate
from evalq.execute.search_decide import subset
from evalq.recipe.stored import stored_search
from evalq.results.folder import RunFolder
from support import recipes

pytestmark = [pytest.mark.slow, pytest.mark.model]

RECIPE = recipes.recipe(
    "search", queries=100, docs=150, candidates=[recipes.DYN_INT8],
    metrics=["nDCG@10"], reference_metrics=["overlap@10"],
    gates=[recipes.gate("nDCG@10", "qrels", max_drop="10%")], resamples=1000,
    parity={"enabled": False},
    search={"weights": ["fp32", "dyn-int8"],
            "vectors": [{"quantize": "none"}, {"quantize": "int8", "rescore": 4}],
            "dims": [384, 256], "survivors": 3})


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("search")
    path = recipes.write(base / "search.yaml", {**RECIPE, "cache_dir": str(base / "cache")})
    calls: Counter[tuple[str, str]] = Counter()
    real = evaluate.encode_texts

    def counted(encoder: Any, texts: Any, *, role: str, **kw: Any) -> Any:
        calls[(type(encoder).__name__ + str(id(encoder)), role)] += 1
        return real(encoder, texts, role=role, **kw)

    embedded = Counter[str]()
    real_embed = InProcessEncoder.embed

    def embed(encoder: InProcessEncoder, texts: Any) -> Any:  # every forward pass
        embedded["texts"] += len(texts)
        return real_embed(encoder, texts)

    evaluate.encode_texts = counted  # type: ignore[assignment]
    InProcessEncoder.embed = embed  # type: ignore[method-assign]
    try:
        outcome = run_recipe_file(path, output=base / "out", progress=False,
                                  use_cache=False)
    finally:
        evaluate.encode_texts = real  # type: ignore[assignment]
        InProcessEncoder.embed = real_embed  # type: ignore[method-assign]
    return {"outcome": outcome, "calls": calls, "folder": RunFolder(base / "out"),
            "embedded": embedded["texts"]}


def _search(searched: dict[str, Any]) -> dict[str, Any]:
    return searched["outcome"].summary["search"]


def test_each_weight_variant_is_encoded_once(searched: dict[str, Any]) -> None:
    calls = searched["calls"]
    # two engines (fp32, dyn-int8), each one document and one query encoding
    assert len(calls) == 4 and set(calls.values()) == {1}
    # and no forward pass beyond them: at most 100 queries + 150 documents per engine
    assert 250 < searched["embedded"] <= 2 * 250
    search = _search(searched)
    assert search["encodings"] == search["minimum_encodings"] == 2
    assert len(search["points"]) == 8


def test_a_combination_scores_what_trec_eval_scores(searched: dict[str, Any]) -> None:
    import pytrec_eval

    from evalq.data.manifest import load_dataset
    from evalq.data.trec import read_run

    ds = load_dataset({"name": "pydocs", "source": "pydocs"}, max_queries=100, max_docs=150)
    qrels = {q: dict(d) for q, d in ds.qrels.judgments.items()}
    name = "s.dyn-int8.int8+rescore4.256"
    root = searched["outcome"].output
    run = read_run(root / "runs" / "pydocs" / f"{name}.trec")
    scores = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    stored = searched["folder"].read_per_query("pydocs", name)
    for qid, value in zip(stored.query_ids, stored.values["nDCG@10"]):
        assert abs(value - scores.get(qid, {}).get("ndcg_cut_10", 0.0)) < 1e-9
    # and the written run is searched at 256 dims: its per-query values differ from 384's
    wide = searched["folder"].read_per_query("pydocs", "s.dyn-int8.int8+rescore4.384")
    assert not np.array_equal(wide.values["nDCG@10"], stored.values["nDCG@10"])


def test_marks_are_the_procedure_on_the_written_values(searched: dict[str, Any]) -> None:
    search, folder = _search(searched), searched["folder"]
    ref = folder.read_per_query("pydocs", "fp32")
    split = split_queries(ref.query_ids, seed=0, explore_fraction=0.5, min_confirm=10)
    spec = GateSpec(metric="nDCG@10", against="qrels", max_drop=0.1, relative=True,
                    column="nDCG@10")

    def verdict(name: str, ids: tuple[str, ...], confidence: float) -> str:
        values = folder.read_per_query("pydocs", name)
        gate = decide_gates([GateSpec(**{**spec.__dict__, "confidence": confidence})],
                            subset(values, ids), subset(ref, ids), resamples=1000, seed=0)
        return gate.verdict

    points = [Point(p["name"], p["cost"], p["quality"]) for p in search["points"]]
    explore = {p.name: verdict(p.name, split.explore, 0.95) for p in points}
    assert explore == {p["name"]: p["explore"] for p in search["points"]}
    family = survivors(points, explore, 3)  # type: ignore[arg-type]
    confirmed = holm(family, 0.025,
                     lambda n, level: verdict(n, split.confirm, 1 - 2 * level))  # type: ignore[arg-type, return-value]
    marks = {n: confirmed[n].mark if n in confirmed else "not confirmed"
             for n in explore}
    assert marks == {p["name"]: p["mark"] for p in search["points"]}


def test_evalq_gate_re_decides_the_search(searched: dict[str, Any],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    root = searched["outcome"].output
    stored = searched["outcome"].summary["search"]
    assert main(["gate", str(root)]) == 0
    out = capsys.readouterr().out
    assert f"search recommendation: {stored['recommendation']}" in out
    assert "note: the stored summary says" not in out  # re-decided exactly
    done = regate(root, stored_sections_of(root), stored_search(
        searched["folder"].read_manifest_data()["recipe"], None, root / "manifest.json"))
    assert done.decided.search is not None
    assert done.decided.search.model_dump() == stored


def test_the_recommendation_is_the_cheapest_certified(searched: dict[str, Any]) -> None:
    search = _search(searched)
    certified = [p for p in search["points"] if p["mark"] == "certified"]
    assert certified, search["points"]
    best = min(certified, key=lambda p: (p["cost"], -p["quality"], p["name"]))
    assert search["recommendation"] == best["name"]
    assert searched["outcome"].passed  # a recommendation: exit 0
    point = next(p for p in search["points"] if p["name"] == best["name"])
    per_vector = point["dims"] if point["vectors"].startswith("int8") else 4 * point["dims"]
    ranges = 2 * 4 * point["dims"] if point["vectors"].startswith("int8") else 0
    assert point["index_bytes"] == 150 * per_vector + ranges
