"""The default terminal summary of `evalq run`: fits a 100-column terminal.

One row per variant: the first gated metric's value and Δ with its CI, the verdict, the
weight and index bytes and the encode speed; then each failed or inconclusive gate with
its reason, wrapped; for candidates searched through an index, each gated measure's
model, index and end-to-end loss. The full table is `evalq run --wide` and the HTML report. Verdicts
come from ``report.verdict``, the same functions the HTML and markdown reports use.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from evalq.report.losses import LOSS_HEADERS, loss_rows
from evalq.report.pipelines import pipeline_views, print_pipelines
from evalq.report.reuse import reuse_notes
from evalq.report.runview import RunView, finite, host_text
from evalq.report.verdict import candidate_verdicts, costs, gates_word, recommend

_STYLE = {"ship": ("pass", "green"), "fail": ("FAIL", "red"),
          "inconclusive": ("inconclusive", "yellow"), "ungated": ("ungated", "dim"),
          "no verdict": ("—", "dim")}


def _mib(value: float | None) -> str:
    return "—" if value is None else f"{value / 2**20:.1f}M"


def _print_losses(console: Any, run: RunView) -> None:
    """Candidates searched through a database or an ANN index: each gated measure's loss
    taken apart (model, index, end to end). Every measure is in ``--wide`` and the report;
    here only the gated ones, so a dozen database variants stay a screenful."""
    gated = set(run.gated_metrics()) or {run.headline_metric() or ""}
    rows = [r for r in loss_rows(run) if r.metric in gated]
    if not rows:
        return
    from rich.table import Table

    several = len(run.datasets) > 1
    table = Table(title="model loss · index loss · end to end (positive = worse)",
                  title_justify="left", box=None, pad_edge=False, padding=(0, 1))
    heads = LOSS_HEADERS if several else LOSS_HEADERS[1:]
    for head in heads:
        table.add_column(head, justify="right" if head.endswith("loss") else "left",
                         no_wrap=True, max_width=24 if head == "candidate" else None,
                         overflow="ellipsis")
    for row in rows:
        cells = row.cells() if several else row.cells()[1:]
        table.add_row(*(escape(c) for c in cells))
    console.print(table)


def print_compact(run: RunView, width: int = 100) -> None:
    """The compact table of a finished run, read from the folder it wrote."""
    from rich.console import Console
    from rich.table import Table

    console = Console(width=width)
    summary = run.summary
    if summary is None:  # an unfinished run has no aggregates
        console.print(f"no summary: the run did not finish; results in {escape(str(run.root))}")
        return
    metric = run.headline_metric() or "—"
    console.print(f"host: {escape(host_text(run.host, engines=False))}", highlight=False)
    conf = f"{run.confidence * 100:g}%"
    statuses = {v.name: v.status for v in candidate_verdicts(run)}
    for ds in run.datasets:
        ds_entry = summary.datasets[ds]
        table = Table(title=f"{run.name} · {ds} · {ds_entry.queries} queries, "
                      f"{ds_entry.documents} docs · Δ vs {run.reference} [{conf} CI]",
                      title_justify="left", box=None, pad_edge=False, padding=(0, 1))
        table.add_column("variant", no_wrap=True, max_width=20, overflow="ellipsis")
        table.add_column(metric, justify="right", no_wrap=True)
        table.add_column("Δ", justify="right", no_wrap=True)
        table.add_column(f"{conf} CI", justify="right", no_wrap=True)
        table.add_column("verdict", no_wrap=True)
        table.add_column("weights", justify="right", no_wrap=True)
        table.add_column("index", justify="right", no_wrap=True)
        table.add_column("docs/s", justify="right", no_wrap=True)
        for name in run.variants:
            entry = run.entry(ds, name)
            if entry is None:
                continue
            m = entry.metrics.get(metric)
            vs = m.vs_reference if m is not None else None
            value = finite(m.value if m is not None else None)
            delta = finite(vs.delta if vs is not None else None)
            low = finite(vs.ci_low if vs is not None else None)
            high = finite(vs.ci_high if vs is not None else None)
            if name == run.reference:
                verdict, style = "reference", "dim"
            else:
                verdict, style = _STYLE.get(statuses.get(name, "no verdict"), ("—", "dim"))
            c = costs(run, name)
            table.add_row(
                name, "—" if value is None else f"{value:.4f}",
                "—" if delta is None else f"{delta:+.4f}",
                "" if low is None or high is None else f"[{low:+.4f},{high:+.4f}]",
                f"[{style}]{verdict}[/{style}]", _mib(c.weight_bytes), _mib(c.index_bytes),
                c.throughput_text())
        console.print(table)
    _print_losses(console, run)
    for text in reuse_notes(run):  # borrowed sides (issue 31): what a verdict certifies
        console.print(f"[dim]{escape(text)}[/dim]", highlight=False)
    for v in candidate_verdicts(run):
        for f in v.failures:
            where = f" ({f.dataset})" if len(run.datasets) > 1 else ""
            colour = "red" if f.verdict == "fail" else "yellow"
            # Labels carry brackets ("[batch composition tokens-512 on 100 queries]") that
            # rich would take for markup and drop: every text from the run is escaped.
            console.print(f"[{colour}]{f.verdict}[/{colour}] {escape(v.name + where)}: "
                          f"{escape(f.gate)} — {escape(f.reason)}", highlight=False)
    for w in summary.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(w)}", highlight=False)
    print_pipelines(console, pipeline_views(summary))
    rec = recommend(run)
    console.print(f"recommendation: {escape(rec.text)}", highlight=False)
    if rec.variant and run.numerics_class:  # int8 kernels differ by instruction set
        cert = escape(str(run.root / "certificates" / f"{rec.variant}.json"))
        console.print(f"  certified on {escape(run.numerics_class)}; for other CPUs run "
                      f"evalq certify {escape(str(run.root))} here, then evalq verify "
                      f"{cert} on them", highlight=False)
    word = gates_word(summary)
    colour = {"PASSED": "green", "FAILED": "red"}.get(word, "yellow")
    verdict = f"[{colour}]{word}[/{colour}]"
    out_dir = escape(str(run.root))
    console.print(f"gates {verdict}; results in {out_dir}; full table: --wide, "
                  f"or evalq report {out_dir}", highlight=False)
