"""What the console prints for ``batch_sensitivity:``: each measured candidate's spread
across batch compositions, read from the summary only (``evalq.execute.sensitivity``
wrote it)."""

from __future__ import annotations

from evalq.core.compositions import outcome_clause
from evalq.core.gates import stored_verdict
from evalq.results.schema import RunSummary


def _figure(value: float | None, spec: str) -> str:
    return format(float("nan") if value is None else value, spec)


def sensitivity_text(summary: RunSummary | None) -> str:
    """The console view of each measured candidate's spread (from the summary only); empty
    without a measured candidate. The app prints it."""
    lines: list[str] = []
    for ds_name, ds in (summary.datasets if summary is not None else {}).items():
        for name, entry in ds.variants.items():
            section = entry.batch_sensitivity
            if section is None:
                continue
            cos = section.between_compositions.cosine
            cut = section.slice
            lines.append(
                f"\nbatch sensitivity {name} on {ds_name} ({section.dependence.level},"
                f" {cut.queries if cut else None} queries x {cut.documents if cut else None} "
                f"docs, +{section.extra_seconds or 0:.0f} s): cosine between "
                f"compositions mean {_figure(cos.mean if cos else None, '.6f')} "
                f"p1 {_figure(cos.p1 if cos else None, '.6f')} "
                f"min {_figure(cos.min if cos else None, '.6f')}")
            for row in section.compositions:
                cells = "  ".join(
                    f"{m} {_figure(v.delta, '+.4f')}" if "delta" in v.model_fields_set
                    else f"{m} {_figure(v.value, '.4f')}"
                    for m, v in row.metrics.items())
                verdict = stored_verdict(row.verdict, row.passed)
                mark = {"pass": "pass", "fail": "FAIL"}.get(verdict, "inconclusive")
                lines.append(f"  {row.id:>14s}  {mark:<12s}  {cells}")
            for m, r in section.metric_range.items():
                lines.append(f"  range of {m} ({r.of}) across compositions: "
                             f"{_figure(r.range, '.4f')} "
                             f"[{_figure(r.min, '+.4f')}, {_figure(r.max, '+.4f')}]")
            clause = outcome_clause(section.failing_compositions,
                                    section.inconclusive_compositions)
            lines.append(f"  verdict: {section.verdict_rule}" + (
                "" if clause == " (passes under all)" else f"; {clause.strip(' ()')}"))
    return "\n".join(lines)
