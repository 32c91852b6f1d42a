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
from pathlib import Path

from evalq.execute.calibrate import calibrate_command


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, nargs="?", help="an evalq results folder")
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--json", type=Path, default=Path("results/calibration.json"))
    args = parser.parse_args()
    return calibrate_command(args.results, trials=args.trials, json_path=args.json)


if __name__ == "__main__":
    raise SystemExit(main())
