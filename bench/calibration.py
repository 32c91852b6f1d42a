"""Gate calibration: the false-pass rate at the margin boundary, the false-fail rate
under no change and the power at half the margin, per interval rule and query count.

Populations: the synthetic panel (sparse 2-20% non-zero, heavy-tailed, bimodal, dense
normal, all ties but one) and, given a results folder, every candidate's real per-query
differences. Each is moved to a true mean of exactly -margin / 0 / -margin/2 (non-zero
values shifted, sparsity kept), and n queries are drawn with replacement, many seeded
trials per cell; each draw is decided by the gate's own rule.

Run: ``.venv/bin/python bench/calibration.py [RESULTS_DIR] [--trials 2000] [--json out.json]``
(the same as ``evalq calibrate``). A few minutes on 2 cores at 2,000 trials.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from evalq.app.cli import main as evalq_main
from evalq.decide.calibration import DEFAULT_RULE
from record import write_record

PEER_RULE = "percentile"  # the gate's rule before the default: the peer of the record


def record(report_path: Path, trials: int, results: Path | None) -> None:
    """The bench record: per n, the worst false-pass rate over the populations of the
    default rule and of the old percentile bootstrap, and their ratio."""
    cells = json.loads(report_path.read_text(encoding="utf-8"))["cells"]
    worst: dict[str, dict[str, dict]] = {}
    for rule in (DEFAULT_RULE.name, PEER_RULE):
        for n in sorted({c["n"] for c in cells}):
            group = [c for c in cells if c["rule"] == rule and c["n"] == n]
            top = max(group, key=lambda c: c["false_pass"])
            worst.setdefault(rule, {})[str(n)] = {
                "false_pass": top["false_pass"], "at": top["population"],
                "within": f"{sum(c['within_bound'] for c in group)}/{len(group)}",
                "power_half_median": sorted(c["power_half"] for c in group)[len(group) // 2]}
    write_record(
        "calibration",
        figures={"trials": trials, "results": str(results) if results else None,
                 "bound": cells[0]["bound"], "worst_false_pass": worst},
        ratios={f"worst false pass n={n}, {DEFAULT_RULE.name} / {PEER_RULE}":
                (row["false_pass"] / worst[PEER_RULE][n]["false_pass"]
                 if worst[PEER_RULE][n]["false_pass"] else None)
                for n, row in worst[DEFAULT_RULE.name].items()},
        peer=f"the old '{PEER_RULE}' bootstrap rule on the same populations and draws "
             "(worst false-pass rate over the populations at the margin boundary; lower is "
             "safer, nominal 0.025)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="?", help="an evalq results folder")
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--json", type=Path, default=Path("results/calibration.json"))
    args = parser.parse_args()
    folder = [str(args.results)] if args.results is not None else []
    code = evalq_main(["calibrate", *folder, "--trials", str(args.trials),
                       "--json", str(args.json)])
    record(args.json, args.trials, args.results)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
