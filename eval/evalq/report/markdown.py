"""Markdown for CI: the job summary of `evalq gate --markdown` (GitHub's
``$GITHUB_STEP_SUMMARY``, a GitLab note) from the summary the gate just decided.

GitHub renders HTML inside markdown, so every text cell is escaped (``&``, ``<``, ``>``)
and table pipes are backslashed: a variant name or a reason cannot break the table or
inject markup.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalq.report import search as search_view
from evalq.report.losses import LOSS_HEADERS, LOSS_NOTE, loss_rows
from evalq.report.pipelines import PipelineView, attribution_text, pipeline_views, verdict_text
from evalq.report.reuse import reuse_notes
from evalq.report.runview import RunView, finite, host_text
from evalq.report.sweeps import SWEEP_HEADERS, SWEEP_NOTE, sweep_rows
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
    summary = run.summary
    head = "⚠️ the run did not finish" if summary is None else \
        "✅ every gate passed" if summary.passed else "❌ gates failed"
    datasets = ", ".join(f"{md(ds)} ({_or_unknown(d.queries)} queries, "
                         f"{_or_unknown(d.documents)} documents)"
                         for ds, d in run.manifest.datasets.items())
    lines = [f"## evalq · {md(run.name)}: {head}", "",
             f"reference `{md(run.reference)}` · {datasets} · git "
             f"`{md(run.git_revision[:12])}` · evalq {md(run.manifest.evalq_version)}",
             "", md(host_text(run.host)), ""]
    verdicts = candidate_verdicts(run)
    rec = recommend(run, verdicts)
    lines += [f"**Recommendation** (cheapest by {COST_LABELS.get(rec.cost_key, rec.cost_key)}"
              f"): {md(rec.text)}", ""]
    metric = run.headline_metric()
    conf = run.confidence
    first_ds = run.datasets[0] if run.datasets else None
    lines += [f"| candidate | verdict | Δ {md(metric)} [{conf * 100:g}% CI] | weights | index "
              "| docs/s |", "|---|---|---:|---:|---:|---:|"]
    for v in verdicts:
        entry = run.entry(first_ds, v.name) if first_ds else None
        m = entry.metrics.get(metric) if entry is not None and metric else None
        vs = m.vs_reference if m is not None else None
        delta = finite(vs.delta) if vs is not None else None
        cell = "—" if vs is None or delta is None else (
            f"{delta:+.4f} [{finite(vs.ci_low) or 0:+.4f}, "
            f"{finite(vs.ci_high) or 0:+.4f}]")
        c = costs(run, v.name)
        speed = c.throughput_text()
        lines.append(f"| {md(v.name)} | {ICON.get(v.status, v.status)} | {cell} | "
                     f"{_mib(c.weight_bytes)} | {c.index_text()} | {speed} |")
    failures = [(v, f) for v in verdicts for f in v.failures]
    if failures:
        lines += ["", f"<details><summary>{len(failures)} failed or inconclusive gate"
                  f"{'s' if len(failures) != 1 else ''}</summary>", ""]
        for v, f in failures:
            where = f" on {md(f.dataset)}" if len(run.datasets) > 1 else ""
            lines.append(f"- **{md(v.name)}** · {md(f.gate)}{where} · *{md(f.verdict)}*: "
                         f"{md(f.reason)}")
        lines += ["", "</details>"]
    lines += [f"- {md(text)}" for text in ["", *reuse_notes(run)][1:]]  # issue 31
    lines += _loss_lines(run)
    lines += _sweep_lines(run)
    lines += _search_lines(run)
    for view in pipeline_views(summary):
        lines += _pipeline_lines(view)
    for w in summary.warnings if summary is not None else []:
        lines += ["", f"> ⚠️ {md(w)}"]
    return "\n".join(lines) + "\n"


def _loss_lines(run: RunView) -> list[str]:
    """Candidates searched through an index: each measure's loss taken apart."""
    rows = loss_rows(run)
    if not rows:
        return []
    return ["", "### Model loss and index loss", "", md(LOSS_NOTE), "",
            "| " + " | ".join(LOSS_HEADERS) + " |", "|---|---|---|---:|---:|---:|",
            *("| " + " | ".join(md(c) for c in r.cells()) + " |" for r in rows)]


def _sweep_lines(run: RunView) -> list[str]:
    """Swept search-time parameters: each value's recall, latency and gates."""
    rows = sweep_rows(run)
    if not rows:
        return []
    return ["", "### Search-time parameter sweep", "", md(SWEEP_NOTE), "",
            "| " + " | ".join(SWEEP_HEADERS) + " |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---|---|",
            *("| " + " | ".join(md(c) for c in r.cells()) + " |" for r in rows)]


SEARCH_ICON = {"certified": "✅ certified", "failed": "❌ failed",
               "inconclusive": "⚠️ inconclusive", "not confirmed": "➖ not confirmed"}


def _search_lines(run: RunView) -> list[str]:
    """A grid search: the recommendation, the split and error control, the table of
    points (frontier first, cheapest first)."""
    search = run.summary.search if run.summary is not None else None
    if search is None:
        return []
    align = "|" + "".join("---:|" if i in search_view.NUMERIC else "---|"
                          for i in range(len(search_view.HEADERS)))
    rows = []
    for p in search_view.ordered_points(search):
        cells = search_view.point_cells(p, search)
        cells[search_view.MARK_COLUMN] = SEARCH_ICON[p.mark]
        rows.append("| " + " | ".join(md(c) for c in cells) + " |")
    control = search_view.error_control_line(search)
    return ["", "### Grid search", "",
            f"**Search recommendation**: {md(search_view.recommendation_text(search))}", "",
            f"{md(control)} · {md(search_view.encodings_line(search))}", "",
            "| " + " | ".join(search_view.HEADERS) + " |", align, *rows]


PIPELINE_ICON = {"pass": "✅ pass", "fail": "❌ failed", "inconclusive": "⚠️ inconclusive",
                 "ungated": "➖ ungated", "reference": "reference"}


def _pipeline_lines(view: PipelineView) -> list[str]:
    """A pipeline's combinations (Δ vs the reference pipeline, verdict), attribution,
    fidelity, cost, and every failed or inconclusive pipeline gate with its reason."""
    head = "✅" if view.passed else "❌" if view.passed is False else "➖"
    lines = ["", f"### {head} pipeline {md(view.name)}", "",
             "| dataset | combination | kind | recall | "
             + " | ".join(f"{md(m)} (Δ [CI])" for m in view.metrics) + " | verdict |",
             "|---|---|---|---:|" + "---:|" * len(view.metrics) + "---|"]
    for c in view.combinations:
        cells = [c.deltas[m].text(signed=True) if m in c.deltas
                 else c.metrics[m].text() if m in c.metrics else "—" for m in view.metrics]
        lines.append(f"| {md(c.dataset)} | {md(c.name)} | {c.kind} | "
                     f"{c.recall.text().split(' [')[0]} | " + " | ".join(cells)
                     + f" | {PIPELINE_ICON.get(verdict_text(c), verdict_text(c))} |")
    lines.append("")
    for c in view.combinations:
        for m, parts in c.attribution.items():
            lines.append(f"- attribution {md(c.name)} {md(m)}: {attribution_text(parts)}")
    for f in view.fidelity:
        figures = ", ".join(f"{md(m)} {v.text()}" for m, v in f.measures.items()
                            if m in ("score_tau", "score_spearman"))
        lines.append(f"- fidelity {md(f.reranker)}@{f.depth} on {md(f.dataset)}: {figures}"
                     + ("" if f.mean_abs_delta is None
                        else f", mean abs score Δ {f.mean_abs_delta:.4f}"))
    for s in view.costs:
        if s.stage == "reranker":
            lines.append(f"- cost {md(s.name)}@{s.depth} on {md(s.dataset)}: "
                         + ("—" if s.seconds_per_query is None
                            else f"{s.seconds_per_query:.4f} s/query")
                         + ("" if s.multiplier is None
                            else f", {s.multiplier:.1f}× the first stage"))
    for c in view.combinations:
        for check in c.checks:
            if not check.passed:
                lines.append(f"- **{md(view.gate_label(c))}** · {md(check.gate)} · "
                             f"*{md(check.verdict)}*: {md(check.reason)}")
    return lines


def job_summary(root: Path, manifest: Mapping[str, Any], summary: Mapping[str, Any]) -> str:
    """The markdown of a gate decision (``summary`` as just re-decided, not as stored)."""
    return run_summary_markdown(RunView.of(Path(root), manifest, summary))


def _or_unknown(value: int | None) -> str:
    return "?" if value is None else str(value)
