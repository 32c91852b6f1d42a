"""The smallest ``summary.json`` the typed results model accepts, for tests that need a
finished run's verdicts beside something else (the load test's decision table)."""

from __future__ import annotations

from typing import Any

from evalq.results.schema import SCHEMA_VERSION, parse_summary


def check(verdict: str, gate: str = "nDCG@10 vs qrels max_drop 1%") -> dict[str, Any]:
    """A stored gate check with the given verdict."""
    return {"gate": gate, "passed": verdict == "pass", "verdict": verdict, "reason": verdict}


def summary(variants: dict[str, dict[str, Any]],
            gates: dict[str, list[dict[str, Any]]] | None = None,
            dataset: str = "pydocs") -> dict[str, Any]:
    """``variants``: name -> ``summary.variants`` entry (the first one is the reference);
    ``gates``: name -> the checks of its per-dataset gate. Validated before it is
    returned, so a test cannot hand evalq a file evalq would refuse."""
    reference = next(iter(variants))
    entries = {}
    for name, info in variants.items():
        entry: dict[str, Any] = {"role": info["role"], "metrics": {}}
        if name in (gates or {}):
            checks = (gates or {})[name]
            entry["gate"] = {"passed": all(c["passed"] for c in checks), "checks": checks}
        entries[name] = entry
    data = {"schema_version": SCHEMA_VERSION, "recipe": "test", "reference": reference,
            "passed": all(v.get("passed") is not False for v in variants.values()),
            "datasets": {dataset: {"queries": 30, "variants": entries}},
            "variants": variants}
    parse_summary(data, __file__)  # type: ignore[arg-type]
    return data
