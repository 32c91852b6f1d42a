"""The bench scripts are run by hand, not by the suite, so a renamed evalq function would
break one silently (bench/calibration.py imported a ``calibrate_command`` that no longer
existed). Each name a bench script imports from evalq must exist."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _evalq_imports(path: Path) -> list[tuple[str, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(node.module, alias.name) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
            and node.module.startswith("evalq") for alias in node.names]


@pytest.mark.parametrize("script", sorted(BENCH.glob("*.py")), ids=lambda p: p.name)
def test_every_name_a_bench_script_imports_from_evalq_exists(script: Path) -> None:
    missing = [f"{module}.{name}" for module, name in _evalq_imports(script)
               if not hasattr(importlib.import_module(module), name)]
    assert not missing, f"{script.name} imports names evalq no longer has: {missing}"
