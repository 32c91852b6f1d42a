"""What a grid search costs against the least its grid needs (issue 31).

    python bench/search_cost.py                          # recipes/cheapest.yaml as shipped
    python bench/search_cost.py --max-queries 100 --max-docs 200

Runs ``recipes/cheapest.yaml`` (3 weight formats × 3 vector precisions × 2 Matryoshka
widths = 18 combinations) through ``evalq run`` without the embedding cache, counting
every encoding call, and reports:

* **encodings**: how many times a text set (a dataset's documents or queries) was
  encoded for the search's weight variants, against the least the grid needs. Widths are
  derived by truncating and renormalizing one full-width encoding, so the least is one
  encoding per weight variant × dataset (3), not one per weight variant × width (6, the
  issue's count); each precision is derived from the float vectors. The peer is the same
  grid written as 18 hand-listed candidates, each encoding both sides again (18).
* **wall time**: the seconds the search spent (its weight variants' encoding, plus
  deriving, searching and measuring every combination, plus the decision) against the
  least (the weight variants' encoding alone). Model loading and quantization happen
  once per weight variant either way and are left out of both. Goal: at most 1.2×.
* **peak memory**: the process's peak RSS (``ru_maxrss``) and each variant's own peak,
  as the run's manifest records it.

The record (``search_cost``) also keeps the search's marks and recommendation.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from evalq.app.api import run_recipe_file
from evalq.execute import evaluate
from evalq.execute.search_decide import decide_search
from evalq.recipe.plan import plan_file
from evalq.results.folder import RunFolder
from record import ROOT, write_record

RECIPE = ROOT / "recipes" / "cheapest.yaml"
GOAL = 1.2


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--recipe", type=Path, default=RECIPE)
    p.add_argument("--max-queries", type=int, default=None)
    p.add_argument("--max-docs", type=int, default=None)
    p.add_argument("--out", type=Path, default=None, help="record folder (default bench/results)")
    args = p.parse_args()

    calls: Counter[tuple[str, str, int]] = Counter()  # (engine, role, texts)
    real = evaluate.encode_texts
    seconds: Counter[str] = Counter()

    def counted(encoder: Any, texts: Any, *, role: str, **kw: Any) -> Any:
        out = real(encoder, texts, role=role, **kw)
        calls[(str(id(encoder)), role, len(texts))] += 1
        return out

    with tempfile.TemporaryDirectory(prefix="search-cost-") as tmp:
        evaluate.encode_texts = counted  # type: ignore[assignment]
        began = time.perf_counter()
        try:
            outcome = run_recipe_file(args.recipe, output=Path(tmp) / "out", progress=False,
                                      use_cache=False, max_queries=args.max_queries,
                                      max_docs=args.max_docs)
        finally:
            evaluate.encode_texts = real  # type: ignore[assignment]
        run_s = time.perf_counter() - began
        plan = plan_file(args.recipe, max_queries=args.max_queries, max_docs=args.max_docs)
        assert plan.search is not None, f"{args.recipe} has no search: section"
        folder = RunFolder(outcome.output)
        manifest = folder.read_manifest_data()
        t0 = time.perf_counter()
        decided = decide_search(plan.search, plan.sections, manifest["variants"], folder,
                                plan.capacity)
        seconds["decide"] = time.perf_counter() - t0
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    weights = list(plan.search.section.weights)
    per_weight = _per_weight(manifest, weights, seconds)
    return _report(args, plan, manifest, calls, seconds, per_weight, decided, outcome, run_s,
                   peak_mib)


def _per_weight(manifest: dict[str, Any], weights: list[str], seconds: Counter[str]
                ) -> dict[str, Any]:
    """Each weight variant's encoding and derivation seconds (summed into ``seconds``)."""
    per_weight: dict[str, Any] = {}
    for name in weights:
        info = manifest["variants"][name]
        encode_s = derive_s = 0.0
        for entry in info["datasets"].values():
            encode_s += sum(entry["encode"][side]["seconds_computing"]
                            for side in ("documents", "queries"))
            derive_s += entry["search"]["seconds"]
        seconds["encode"] += encode_s
        seconds["derive"] += derive_s
        per_weight[name] = {"encode_s": encode_s, "derive_s": derive_s,
                            "startup_s": info["timings"].get("startup_s"),
                            "peak_rss_mb": info["timings"].get("peak_rss_mb")}
    return per_weight


def _report(args: Any, plan: Any, manifest: dict[str, Any],
            calls: Counter[tuple[str, str, int]], seconds: Counter[str],
            per_weight: dict[str, Any], decided: Any, outcome: Any, run_s: float,
            peak_mib: float) -> int:
    """The record and the printed line; exit 0 when the goal is met."""
    weights = list(plan.search.section.weights)
    # A corpus encoding is a call on a dataset's whole document set (the parity preflight
    # encodes a few texts as documents too; those are not the search's). Every engine of
    # this recipe is a weight variant.
    corpus_sizes = {d["documents"] for d in manifest["datasets"].values()}
    engines = len({engine for engine, _, _ in calls})
    search_encodings = sum(n for (_, role, size), n in calls.items()
                           if role == "document" and size in corpus_sizes)
    minimum = plan.search.encodings
    spent_s = seconds["encode"] + seconds["derive"] + seconds["decide"]
    ratio = spent_s / seconds["encode"]
    combos = len(plan.search.combinations)
    figures = {
        "recipe": str(args.recipe.relative_to(ROOT)) if args.recipe.is_relative_to(ROOT)
        else str(args.recipe),
        "combinations": combos, "datasets": plan.search.datasets,
        "queries": sum(d["queries"] for d in manifest["datasets"].values()),
        "documents": sum(d["documents"] for d in manifest["datasets"].values()),
        "encoding_calls": {"document": sum(n for (_, r, _), n in calls.items()
                                           if r == "document"),
                           "query": sum(n for (_, r, _), n in calls.items() if r == "query"),
                           "engines": engines},
        "encodings_spent": search_encodings, "minimum_encodings": minimum,
        "issue_minimum_encodings": len(weights) * len(plan.search.section.dims or [1])
        * plan.search.datasets,
        "hand_listed_encodings": combos * plan.search.datasets,
        "seconds": {"weights_encode": seconds["encode"], "derive_search_measure":
                    seconds["derive"], "decide": seconds["decide"], "spent": spent_s,
                    "whole_run": run_s},
        "per_weight": per_weight, "peak_rss_mib": peak_mib,
        "recommendation": decided.recommendation,
        "marks": {pt.name: pt.mark for pt in decided.points},
        "passed": outcome.passed,
    }
    ratios = {"time_spent_over_minimum": ratio,
              "encodings_spent_over_minimum": search_encodings / minimum,
              "hand_listed_encodings_over_spent": combos * plan.search.datasets
              / max(search_encodings, 1)}
    write_record("search_cost", figures, ratios,
                 peer=f"the least the grid needs: {minimum} encoding(s), one per weight "
                 "variant × dataset; and the same grid as hand-listed candidates "
                 f"({combos * plan.search.datasets} encodings)", out_dir=args.out,
                 notes=f"goal: time_spent_over_minimum <= {GOAL}; model loading and "
                 "quantization are once per weight variant either way and left out")
    print(f"encodings {search_encodings} (least {minimum}, hand-listed "
          f"{combos * plan.search.datasets}); search {spent_s:.1f} s against "
          f"{seconds['encode']:.1f} s of encoding = {ratio:.2f}× (goal ≤ {GOAL}); "
          f"peak RSS {peak_mib:.0f} MiB; recommendation {decided.recommendation}")
    return 0 if ratio <= GOAL and search_encodings == minimum else 1


if __name__ == "__main__":
    sys.exit(main())
