"""What the console prints for ``batch_sensitivity:``: each measured candidate's spread
across batch compositions, read from the summary only (``evalq.execute.sensitivity``
wrote it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalq.core.compositions import outcome_clause
from evalq.core.gates import stored_verdict


def sensitivity_text(summary: Mapping[str, Any]) -> str:
    """The console view of each measured candidate's spread (from the summary only); empty
    without a measured candidate. The app prints it."""
    lines: list[str] = []
    for ds_name, ds in summary.get("datasets", {}).items():
        for name, entry in ds.get("variants", {}).items():
            section = entry.get("batch_sensitivity")
            if not section:
                continue
            cos = (section.get("between_compositions") or {}).get("cosine") or {}
            level = section["dependence"].get("level")
            lines.append(
                f"\nbatch sensitivity {name} on {ds_name} ({level},"
                f" {section['slice']['queries']} queries x {section['slice']['documents']} "
                f"docs, +{section.get('extra_seconds') or 0:.0f} s): cosine between "
                f"compositions mean {cos.get('mean', float('nan')):.6f} "
                f"p1 {cos.get('p1', float('nan')):.6f} min {cos.get('min', float('nan')):.6f}")
            for row in section["compositions"]:
                cells = "  ".join(
                    f"{m} {v['delta']:+.4f}" if "delta" in v else f"{m} {v['value']:.4f}"
                    for m, v in row["metrics"].items())
                verdict = stored_verdict(row.get("verdict"), row["passed"])
                mark = {"pass": "pass", "fail": "FAIL"}.get(verdict, "inconclusive")
                lines.append(f"  {row['id']:>14s}  {mark:<12s}  {cells}")
            for m, r in section["metric_range"].items():
                lines.append(f"  range of {m} ({r['of']}) across compositions: "
                             f"{r['range']:.4f} [{r['min']:+.4f}, {r['max']:+.4f}]")
            clause = outcome_clause(section["failing_compositions"],
                                    section.get("inconclusive_compositions", []))
            lines.append(f"  verdict: {section['verdict_rule']}" + (
                "" if clause == " (passes under all)" else f"; {clause.strip(' ()')}"))
    return "\n".join(lines)
