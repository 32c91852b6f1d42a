"""`evalq compare RUN_A RUN_B [--markdown]`: the report reads and pairs the two folders'
stored per-query values (:mod:`evalq.report.compare`), the command computes their paired
differences (:mod:`evalq.execute.compare`), and the report renders what it is given.
"""

from __future__ import annotations

from pathlib import Path

from evalq.execute.compare import metric_diffs
from evalq.report.compare import (
    Comparison,
    comparison,
    load_comparable,
    paired_values,
    render_markdown,
    render_text,
    stats_settings,
)
from evalq.report.runview import class_warning


def compare_runs(path_a: str | Path, path_b: str | Path) -> Comparison:
    """What changed from run A to run B (refused, exit 2, unless comparable)."""
    a, b = load_comparable(path_a, path_b)
    return comparison(a, b, metric_diffs(paired_values(a, b), stats_settings(a)))


def compare_command(path_a: Path, path_b: Path, *, markdown: bool = False) -> int:
    c = compare_runs(path_a, path_b)
    print(render_markdown(c) if markdown else render_text(c), end="")
    warning = class_warning({"A": c.a.numerics_class, "B": c.b.numerics_class})
    if warning is not None:
        print(warning)
    return 0
