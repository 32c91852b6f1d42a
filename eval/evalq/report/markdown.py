"""Markdown for CI: the job summary of `evalq gate --markdown` (GitHub's
``$GITHUB_STEP_SUMMARY``, a GitLab note) from the summary the gate just decided.

GitHub renders HTML inside markdown, so every text cell is escaped (``&``, ``<``, ``>``)
and table pipes are backslashed: a variant name or a reason cannot break the table or
inject markup.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalq.report.runview import RunView, finite
from evalq.report.verdict import COST_LABELS, candidate_verdicts, costs, recommend

ICON = {"ship": "✅ may ship", "fail": "❌ failed", "inconclusive": "⚠️ inconclusive",
        "not run": "➖ did not run", "no verdict": "➖ no verdict", "ungated": "➖ ungated"}


def md(text: Any) -> str:
    """Text safe in a markdown table cell (no HTML, no pipes, one line)."""
    return (str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("|", "\\|").replace("\n", " "))


def _mib(value: float | None) -> str:
    return "—" if value is None else f"{value / 2**20:.1f} MiB"


def run_summary_markdown(run: RunView) -> str:
    summary = run.summary or {}
    passed = summary.get("passed")
    head = "✅ every gate passed" if passed else "❌ gates failed" if summary else \
        "⚠️ the run did not finish"
    datasets = ", ".join(f"{md(ds)} ({d.get('queries', '?')} queries, "
                         f"{d.get('documents', '?')} documents)"
                         for ds, d in (run.manifest.get("datasets") or {}).items())
    lines = [f"## evalq · {md(run.name)}: {head}", "",
             f"reference `{md(run.reference)}` · {datasets} · git "
             f"`{md(run.git_revision[:12])}` · evalq {md(run.manifest.get('evalq_version'))}",
             ""]
    verdicts = candidate_verdicts(run)
    rec = recommend(run, verdicts)
    lines += [f"**Recommendation** (cheapest by {COST_LABELS.get(rec.cost_key, rec.cost_key)}"
              f"): {md(rec.text)}", ""]
    metric = run.headline_metric()
    conf = (run.recipe.get("stats") or {}).get("confidence", 0.95)
    first_ds = run.datasets[0] if run.datasets else None
    lines += [f"| candidate | verdict | Δ {md(metric)} [{conf * 100:g}% CI] | weights | index "
              "| docs/s |", "|---|---|---:|---:|---:|---:|"]
    for v in verdicts:
        entry = run.entry(first_ds, v.name) if first_ds else None
        vs = (((entry or {}).get("metrics") or {}).get(metric) or {}).get("vs_reference") or {}
        delta = finite(vs.get("delta"))
        cell = "—" if delta is None else (
            f"{delta:+.4f} [{finite(vs.get('ci_low')) or 0:+.4f}, "
            f"{finite(vs.get('ci_high')) or 0:+.4f}]")
        c = costs(run, v.name)
        speed = "—" if c.throughput is None else f"{c.throughput:.1f}"
        lines.append(f"| {md(v.name)} | {ICON.get(v.status, v.status)} | {cell} | "
                     f"{_mib(c.weight_bytes)} | {_mib(c.index_bytes)} | {speed} |")
    failures = [(v, f) for v in verdicts for f in v.failures]
    if failures:
        lines += ["", f"<details><summary>{len(failures)} failed or inconclusive gate"
                  f"{'s' if len(failures) != 1 else ''}</summary>", ""]
        for v, f in failures:
            where = f" on {md(f.dataset)}" if len(run.datasets) > 1 else ""
            lines.append(f"- **{md(v.name)}** · {md(f.gate)}{where} · *{md(f.verdict)}*: "
                         f"{md(f.reason)}")
        lines += ["", "</details>"]
    for w in summary.get("warnings", []):
        lines += ["", f"> ⚠️ {md(w)}"]
    return "\n".join(lines) + "\n"


def job_summary(root: Path, manifest: dict[str, Any], summary: dict[str, Any]) -> str:
    """The markdown of a gate decision (``summary`` as just re-decided, not as stored)."""
    return run_summary_markdown(RunView(root=Path(root), manifest=manifest, summary=summary))
