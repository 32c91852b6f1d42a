"""The words for a candidate's outcome across batch compositions (``batch_sensitivity:``).

The run's sensitivity note (``evalq.execute.sensitivity``) and the console's sensitivity
view (``evalq.report.sensitivity``) say the same thing in the same words, so the clause
lives here: in core, the one part both may import. ``decide`` would fit its meaning, but
report reads results folders only and may not import decide; and execute and report are
siblings, so neither may import the other.
"""

from __future__ import annotations

from collections.abc import Sequence


def outcome_clause(failing: Sequence[str], undecided: Sequence[str]) -> str:
    parts = [f"fails under {', '.join(failing)}"] if failing else []
    parts += [f"inconclusive under {', '.join(undecided)}"] if undecided else []
    return f" ({'; '.join(parts)})" if parts else " (passes under all)"
