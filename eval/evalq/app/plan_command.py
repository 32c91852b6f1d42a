"""``evalq validate`` and ``evalq plan``: the recipe's plan (``evalq.recipe.plan``) printed.

The planning is the recipe part's; printing it, and turning one file's bad input into a
line on stderr so the next file is still checked, is the app's (only the app prints).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from evalq.core.errors import InputError
from evalq.plan.types import Plan
from evalq.recipe.plan import describe_plan, plan_file


def validate_files(paths: Sequence[Path], *, here: bool = False) -> bool:
    """`evalq validate`: every file planned; each file's problems printed; all good?

    Without ``here`` a recipe meant for another machine (device: cuda, fp8) validates,
    with notes on what this machine could not run."""
    ok = True
    for path in paths:
        try:
            plan = plan_file(path, machine=here)
        except InputError as exc:
            print(f"evalq: error: {exc}", file=sys.stderr)
            ok = False
            continue
        print(f"{path}: ok ({len(plan.variants) - 1} candidates, {len(plan.gates)} gates)")
        for note in plan.machine_notes:
            print(f"  note: {note}")
    return ok


def print_plan(path: Path, *, output: Path | None = None,
               only: Sequence[str] | None = None) -> Plan:
    """`evalq plan`: what a run would load, encode, cache and gate, printed."""
    plan = plan_file(path, output=output, only=only)
    print(describe_plan(plan))
    return plan
