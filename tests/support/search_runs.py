"""A recipe's ``search:`` run through ``evalq run`` on the real MiniLM, counted, and the
search's bookkeeping re-derived from what the run wrote (issue 31).

The grid tests (tests/execute/test_search_run.py over weights × precisions × widths,
tests/execute/test_search_index_run.py over index options) check the same promises: each
weight variant is encoded once, and the marks are :mod:`evalq.decide.search`'s procedure
(split, explore, prune, Holm) applied to the written per-query values. Both use these.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from evalq.app.api import run_recipe_file
from evalq.core.gates import GateSpec
from evalq.data.manifest import load_dataset
from evalq.data.trec import read_run
from evalq.decide.gate import decide_gates
from evalq.decide.search import Point, holm, split_queries, survivors
from evalq.engines.inprocess import InProcessEncoder
from evalq.execute import evaluate
from evalq.execute.search_decide import subset
from evalq.results.folder import RunFolder
from support import recipes


def counted_run(base: Path, recipe: dict[str, Any]) -> dict[str, Any]:
    """Run ``recipe`` (no cache) counting the encoding calls per engine and role, and the
    texts every in-process forward pass embedded."""
    path = recipes.write(base / "search.yaml", {**recipe, "cache_dir": str(base / "cache")})
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


def procedure_marks(search: dict[str, Any], folder: RunFolder, spec: GateSpec, *,
                    resamples: int, min_confirm: int = 10) -> tuple[dict[str, str],
                                                                    dict[str, str]]:
    """The explore verdicts and the marks that split → explore → prune → Holm give on
    the per-query values the run wrote (one dataset, pydocs; the recipe's one gate
    ``spec``), to compare with the summary's."""
    ref = folder.read_per_query("pydocs", "fp32")
    split = split_queries(ref.query_ids, seed=search["split"]["seed"],
                          explore_fraction=search["split"]["explore_fraction"],
                          min_confirm=min_confirm)

    def verdict(name: str, ids: tuple[str, ...], confidence: float) -> str:
        values = folder.read_per_query("pydocs", name)
        gate = decide_gates([GateSpec(**{**spec.__dict__, "confidence": confidence})],
                            subset(values, ids), subset(ref, ids), resamples=resamples,
                            seed=0)
        return gate.verdict

    points = [Point(p["name"], p["cost"], p["quality"]) for p in search["points"]]
    explore = {p.name: verdict(p.name, split.explore, 0.95) for p in points}
    family = survivors(points, explore, search["survivors"])  # type: ignore[arg-type]
    confirmed = holm(family, search["alpha"],
                     lambda n, level: verdict(n, split.confirm, 1 - 2 * level))  # type: ignore[arg-type, return-value]
    marks = {n: confirmed[n].mark if n in confirmed else "not confirmed" for n in explore}
    return explore, marks


def cheapest_certified(search: dict[str, Any]) -> dict[str, Any]:
    """The summary's point the recommendation must be: certified and cheapest (ties: the
    better quality, then the name)."""
    certified = [p for p in search["points"] if p["mark"] == "certified"]
    assert certified, search["points"]
    return min(certified, key=lambda p: (p["cost"], -p["quality"], p["name"]))


def assert_ndcg_is_trec_eval(searched: dict[str, Any], name: str, *, queries: int,
                             docs: int) -> None:
    """Combination ``name``'s stored per-query nDCG@10 is trec_eval's on its run file."""
    import pytrec_eval

    ds = load_dataset(recipes.PYDOCS, max_queries=queries, max_docs=docs)
    qrels = {q: dict(d) for q, d in ds.qrels.judgments.items()}
    run = read_run(searched["outcome"].output / "runs" / "pydocs" / f"{name}.trec")
    scores = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    stored = searched["folder"].read_per_query("pydocs", name)
    assert len(stored.query_ids) == queries
    for qid, value in zip(stored.query_ids, stored.values["nDCG@10"]):
        assert abs(value - scores.get(qid, {}).get("ndcg_cut_10", 0.0)) < 1e-9
