"""Grid search calibration: the family-wise false-pass rate of the search (explore/confirm
split, survivors, Holm through the gates' verdicts) under the least favourable null, every
configuration's true drop exactly at the margin, against the naive procedure (each
configuration gated at full alpha on all queries, any pass kept) on the same draws.

Grids of 18 and 30 configurations correlated through shared queries, drawn from the
synthetic panel of the gate calibration; 95% Clopper-Pearson intervals on every rate.

Run: ``.venv/bin/python bench/search_calibration.py [--searches 2000]`` (the same as
``evalq calibrate --search``). About twenty minutes on 2 busy cores at 2,000 searches.

``--per-test`` measures instead what the family asks of each survivor: the gate's default
rule alone at one-sided alpha and at alpha / 5 (the first Holm round with 5 survivors), on
the sparse populations where the search's worst rates are, at 4,999 resamples (the record
``search_pertest``), each rate with its 95% Clopper-Pearson interval. A few minutes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from evalq.decide.calibration import DEFAULT_RULE, calibrate, synthetic_panel
from evalq.decide.search_calibration import clopper_pearson
from evalq.execute.calibrate import search_calibration_report
from record import write_record

PER_TEST_POPULATIONS = ("sparse-5%", "sparse-10%", "sparse-20%")


def per_test(trials: int = 8000, resamples: int = 4999) -> None:
    """The default rule's false-pass rate at the margin, alone, at the gates' one-sided
    0.025 and at 0.005, on the sparse populations at 100 and 300 queries."""
    populations = [p for p in synthetic_panel() if p.name in PER_TEST_POPULATIONS]
    figures: dict[str, dict[str, float]] = {}
    for level in (0.025, 0.005):
        cells = calibrate(populations, sizes=(100, 300), trials=trials, resamples=resamples,
                          rules=(DEFAULT_RULE,), confidence=1.0 - 2.0 * level, seed=11,
                          blocks=8)
        for c in cells:
            row = figures.setdefault(f"{c.population} n={c.n}", {})
            row[f"false_pass_at_{level}"] = c.false_pass
            row[f"false_pass_at_{level}_cp95"] = list(clopper_pearson(
                round(c.false_pass * trials), trials))
            row[f"power_half_at_{level}"] = c.power_half
    write_record(
        "search_pertest",
        figures={"trials": trials, "resamples": resamples, "rule": DEFAULT_RULE.name,
                 "cells": figures},
        ratios={f"{key}: false pass / nominal at 0.005": row["false_pass_at_0.005"] / 0.005
                for key, row in figures.items()},
        peer="the nominal one-sided level (0.005 = alpha / 5, the first Holm round with 5 "
             "survivors; 0.025 = alpha)")


def record(report_path: Path, searches: int) -> None:
    """The bench record: every pooled rate (and the worst population of the search) per
    grid; the ratio is the naive rate over the search's."""
    data = json.loads(report_path.read_text(encoding="utf-8"))
    rates = data["rates"]
    figures: dict[str, dict] = {}
    ratios: dict[str, float | None] = {}
    for r in rates:
        key = f"G={r['configurations']} keep={r['keep']} n={r['queries']}"
        row = figures.setdefault(key, {"worst_search_population": None})
        if r["population"] == "all":
            row[r["procedure"]] = {k: r[k] for k in ("searches", "false_passes", "rate",
                                                     "low", "high")}
        elif r["procedure"] == "search":
            worst = row["worst_search_population"]
            if worst is None or r["rate"] > worst["rate"]:
                row["worst_search_population"] = {k: r[k] for k in (
                    "population", "searches", "false_passes", "rate", "low", "high")}
    for key, row in figures.items():
        ratios[f"{key}: naive / search family-wise rate"] = (
            row["naive"]["rate"] / row["search"]["rate"] if row["search"]["rate"] else None)
    write_record(
        "search_calibration",
        figures={"searches_per_population": searches, "rule": data["rule"],
                 "alpha": rates[0]["alpha"], "correlation": rates[0]["correlation"],
                 "grids": figures},
        ratios=ratios,
        peer="the naive procedure on the same simulated draws: every configuration gated "
             "at full alpha on all queries, any pass kept (family-wise false-pass rate; "
             "lower is safer, nominal 0.025)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--searches", type=int, default=2000)
    parser.add_argument("--json", type=Path, default=Path("results/search_calibration.json"))
    parser.add_argument("--per-test", action="store_true",
                        help="the gate's rule alone at alpha and alpha / 5 instead")
    args = parser.parse_args()
    if args.per_test:
        per_test()
        return 0
    print(search_calibration_report(searches=args.searches, json_path=args.json))
    record(args.json, args.searches)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
