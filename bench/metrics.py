"""Qrels metrics: evalq against pytrec_eval and ranx on one large workload.

10,000 queries x top-100 run, graded qrels (~10 judged per query, half of them retrieved),
measures nDCG@10, R@100, RR@10, AP@100, P@10 computed in one call. Timed (best of 3):

* evalq from arrays: ``Ranking.from_search`` on the search's index/score matrices +
  ``evaluate`` against a ``JudgedIndex`` built once per dataset (the ``evalq run`` path;
  the index build is reported separately, it is paid once for all variants);
* evalq from dicts: ``evaluate_dict`` on ``{qid: {docid: score}}``;
* pytrec_eval from the same dicts (``RelevanceEvaluator`` construction + ``evaluate``);
* ranx from the same dicts (``Qrels``/``Run`` construction included; numba's compilation is
  excluded by a warm-up call).

Prints seconds, ratios against pytrec_eval and, per measure, the largest absolute
difference of per-query values from pytrec_eval. Timings are printed, never asserted.
Run: ``.venv/bin/python bench/metrics.py [--queries N] [--depth K]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from record import write_record

MEASURES = ("nDCG@10", "R@100", "RR@10", "AP@100", "P@10")
PYTREC = {"nDCG@10": "ndcg_cut_10", "R@100": "recall_100", "AP@100": "map_cut_100",
          "P@10": "P_10"}
RANX = {"nDCG@10": "ndcg@10", "R@100": "recall@100", "RR@10": "mrr@10", "AP@100": "map@100",
        "P@10": "precision@10"}


def make_workload(n_queries: int, depth: int, n_docs: int, seed: int = 0) -> dict[str, Any]:
    """A search result as matrices (float32 scores, as an exact inner-product search gives)
    plus the same run and qrels as dicts."""
    rng = np.random.default_rng(seed)
    doc_ids = tuple(f"doc{i}" for i in range(n_docs))
    query_ids = tuple(f"q{i}" for i in range(n_queries))
    # Distinct documents per query: sample depth + 5 and keep the first depth for the run.
    picks = np.argsort(rng.random((n_queries, n_docs // 100)), axis=1)[:, : depth + 5]
    picks = picks * 100 + rng.integers(0, 100, size=(n_queries, 1))
    scores = -np.sort(-rng.random((n_queries, depth), dtype=np.float32), axis=1)
    indices = picks[:, :depth].astype(np.int64)
    run = {
        q: dict(zip([doc_ids[i] for i in row], srow, strict=True))
        for q, row, srow in zip(query_ids, indices.tolist(), scores.astype(np.float64).tolist(),
                                strict=True)
    }
    judged_in_run = rng.integers(0, depth, size=(n_queries, 5))
    judged = np.concatenate(
        [np.take_along_axis(indices, judged_in_run, axis=1), picks[:, depth:]], axis=1
    )
    levels = rng.integers(0, 4, size=judged.shape)
    qrels = {
        q: {doc_ids[d]: int(r) for d, r in zip(row, lrow, strict=True)}
        for q, row, lrow in zip(query_ids, judged.tolist(), levels.tolist(), strict=True)
    }
    return {"doc_ids": doc_ids, "query_ids": query_ids, "indices": indices,
            "scores": scores, "run": run, "qrels": qrels}


def best_of(fn: Callable[[], Any], repeat: int = 3) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


def pytrec_per_query(qrels: dict, run: dict) -> dict[str, np.ndarray]:
    """pytrec_eval's per-query values in qrels order (0 for queries it leaves out).

    RR@10 is derived from pytrec_eval's own P@1..10 (rank r is relevant iff the hit count
    grows there), since its ``recip_rank`` has no cutoff.
    """
    import pytrec_eval

    spec = {"ndcg_cut.10", "recall.100", "map_cut.100", "P." + ",".join(map(str, range(1, 11)))}
    res = pytrec_eval.RelevanceEvaluator(qrels, spec).evaluate(run)
    out = {m: np.array([res[q][k] if q in res else 0.0 for q in qrels])
           for m, k in PYTREC.items()}
    rr = []
    for q in qrels:
        hits = [round(res[q][f"P_{r}"] * r) if q in res else 0 for r in range(1, 11)]
        first = next((r for r, h in enumerate(hits, start=1) if h >= 1), None)
        rr.append(0.0 if first is None else 1.0 / first)
    out["RR@10"] = np.array(rr)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=10_000)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--docs", type=int, default=500_000)
    parser.add_argument("--no-ranx", action="store_true", help="skip ranx (slow first compile)")
    args = parser.parse_args()

    import pytrec_eval

    from evalq.core.dataset import Qrels
    from evalq.core.ranking import Ranking
    from evalq.measure.judged import JudgedIndex, evaluate, evaluate_dict
    from evalq.measure.measures import parse_measures

    w = make_workload(args.queries, args.depth, args.docs)
    measures = parse_measures(list(MEASURES))
    qrels_typed = Qrels(w["qrels"])
    print(f"workload: {args.queries} queries x top-{args.depth}, "
          f"{sum(map(len, w['qrels'].values()))} judgments, corpus {args.docs} docs")

    build_s, index = best_of(lambda: JudgedIndex.build(qrels_typed, w["doc_ids"]), repeat=1)

    def evalq_arrays() -> Any:
        ranking = Ranking.from_search(w["query_ids"], w["doc_ids"], w["indices"], w["scores"])
        return evaluate(ranking, index, measures)

    def pytrec() -> Any:
        evaluator = pytrec_eval.RelevanceEvaluator(
            w["qrels"], {"ndcg_cut.10", "recall.100", "recip_rank", "map_cut.100", "P.10"})
        return evaluator.evaluate(w["run"])

    timings: dict[str, float] = {}
    outputs: dict[str, dict[str, np.ndarray]] = {}
    timings["pytrec_eval (dicts)"], _ = best_of(pytrec)
    timings["evalq (arrays)"], got = best_of(evalq_arrays)
    outputs["evalq (arrays)"] = got.values
    timings["evalq (dicts)"], got = best_of(lambda: evaluate_dict(w["run"], qrels_typed,
                                                                  measures))
    outputs["evalq (dicts)"] = got.values
    if not args.no_ranx:
        import ranx

        ranx.evaluate(ranx.Qrels({"q": {"a": 1}}), ranx.Run({"q": {"a": 1.0, "b": 0.5}}),
                      list(RANX.values()))  # numba compile, excluded

        def with_ranx() -> Any:
            run = ranx.Run(w["run"])
            ranx.evaluate(ranx.Qrels(w["qrels"]), run, list(RANX.values()))
            return run

        timings["ranx (dicts)"], ranx_run = best_of(with_ranx)
        outputs["ranx (dicts)"] = {
            m: np.array([float(ranx_run.scores[k].get(q, 0.0)) for q in w["qrels"]])
            for m, k in RANX.items()
        }

    base = timings["pytrec_eval (dicts)"]
    print(f"\nJudgedIndex.build (once per dataset): {build_s:.3f} s\n")
    print(f"{'implementation':<22}{'seconds':>10}{'x pytrec_eval':>15}")
    for name, seconds in timings.items():
        print(f"{name:<22}{seconds:>10.3f}{seconds / base:>15.2f}")
    print("\ntargets: evalq (arrays) <= 0.20x, evalq (dicts) <= 1.00x:",
          "arrays", "MET" if timings["evalq (arrays)"] <= 0.2 * base else "MISSED",
          "| dicts", "MET" if timings["evalq (dicts)"] <= base else "MISSED")

    reference = pytrec_per_query(w["qrels"], w["run"])
    print("\nmax |value - pytrec_eval| per query")
    print(f"{'measure':<10}" + "".join(f"{name:>18}" for name in outputs))
    max_diff: dict[str, dict[str, float]] = {}
    for m in MEASURES:
        diffs = {name: float(np.abs(out[m] - reference[m]).max())
                 for name, out in outputs.items()}
        max_diff[m] = diffs
        cells = "".join(f"{d:>18.2e}" for d in diffs.values())
        print(f"{m:<10}{cells}   (mean {reference[m].mean():.4f})")
    write_record(
        "metrics",
        figures={"queries": args.queries, "depth": args.depth, "docs": args.docs,
                 "measures": list(MEASURES), "judged_index_build_s": build_s,
                 "seconds": timings, "max_abs_diff_vs_pytrec_eval": max_diff},
        ratios={f"{name} / pytrec_eval (dicts)": seconds / base
                for name, seconds in timings.items() if not name.startswith("pytrec")},
        peer="pytrec_eval RelevanceEvaluator on the same dicts, construction included "
             "(ranx with Qrels/Run construction, numba compile excluded, as a second peer); "
             "ratios are seconds over pytrec_eval's seconds, best of 3, lower is faster")


if __name__ == "__main__":
    main()
