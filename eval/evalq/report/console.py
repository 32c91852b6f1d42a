"""What `evalq run --wide` prints: one table per dataset, then the gate verdicts with
reasons (the default is the compact view of ``report.compact``).

Reads the summary only (never recomputes), so the console, the JSON and the JUnit report
cannot disagree.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from evalq.report.compact import print_compact
from evalq.report.losses import LOSS_HEADERS, loss_rows
from evalq.report.pipelines import pipeline_views, print_pipelines
from evalq.report.runview import RunView, host_text
from evalq.report.sweeps import SWEEP_HEADERS, sweep_rows
from evalq.report.verdict import gates_word
from evalq.results.schema import EncodeSection, GateCheck, MetricEntry


def _fmt(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _metric_cell(entry: MetricEntry | None, confidence: float | None = None) -> str:
    if entry is None:
        return _fmt(None)
    vs = entry.vs_reference
    value = _fmt(entry.value)
    if vs is None:
        return value
    # a gate's own confidence, when it differs from the table's
    own = vs.confidence
    at = f"@{own * 100:g}%" if own is not None and own != confidence else ""
    low, high = vs.ci_low, vs.ci_high
    # No interval (a single query, or values that are all equal): say so, never crash.
    interval = (f"[{low:+.3f},{high:+.3f}]" if low is not None and high is not None
                else "[no interval]")
    delta = "—" if vs.delta is None else f"{vs.delta:+.4f}"
    return f"{value} {delta} {interval}{at}"


def _rate(encode: EncodeSection) -> str:
    docs = encode.documents
    if docs is None and encode.reused is not None and encode.reused.documents is not None:
        return "reused"  # issue 31: searched against another variant's or a file's vectors
    if docs is None or not docs.texts_per_s:
        return "cached"
    return f"{docs.texts_per_s:.0f}/s {(docs.tokens_per_s or 0) / 1000:.1f}k tok/s"


def _failed(console: Any, name: str, checks: list[GateCheck]) -> None:
    for check in checks:
        if not check.passed:
            console.print(f"  [red]{check.verdict}[/red] {escape(name)}: "
                          f"{escape(check.gate)} — {escape(check.reason)}", soft_wrap=True)


def _mib(n: float | None) -> str:
    return f"{n / 2**20:.1f}M" if n else "—"


COMPACT_WIDTH = 100


def _print_losses(console: Any, run: RunView) -> None:
    """Candidates searched through an index: each measure's loss taken apart."""
    rows = loss_rows(run)
    if not rows:
        return
    from rich.table import Table

    table = Table(title="model loss and index loss (positive = worse)", title_justify="left")
    for i, head in enumerate(LOSS_HEADERS):
        table.add_column(head, justify="right" if i >= 3 else "left", no_wrap=True)
    for row in rows:
        table.add_row(*(escape(c) for c in row.cells()))
    console.print(table)


def _print_sweeps(console: Any, run: RunView) -> None:
    """Swept search-time parameters: each value's recall, latency and gates."""
    rows = sweep_rows(run)
    if not rows:
        return
    from rich.table import Table

    table = Table(title="search-time sweeps (★ cheapest certified, ● the variant's own "
                  "value)", title_justify="left")
    for i, head in enumerate(SWEEP_HEADERS):
        table.add_column(head, justify="right" if 3 <= i <= 8 else "left", no_wrap=True)
    for row in rows:
        table.add_row(*(escape(c) for c in row.cells()))
    console.print(table)


def print_run_table(run: RunView, wide: bool = False) -> None:
    """The table of a finished run, read from the folder it wrote (``RunView.load``)."""
    if not wide:
        print_compact(run, width=COMPACT_WIDTH)
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(width=220)
    summary = run.summary
    if summary is None:  # an unfinished run has no aggregates
        console.print(f"no summary: the run did not finish; results in {escape(str(run.root))}")
        return
    console.print(f"host: {escape(host_text(run.host))}", highlight=False)
    metrics, reference_metrics = run.recipe.metrics, run.recipe.reference_metrics
    confidence = run.confidence
    variants_info = summary.variants
    conf = f"{confidence * 100:g}%"
    for ds_name, ds in summary.datasets.items():
        table = Table(title=f"{run.name} · {ds_name} · {ds.queries} queries, "
                      f"{ds.documents} documents · value Δ [{conf} CI] vs "
                      f"{summary.reference}", title_justify="left")
        table.add_column("variant", no_wrap=True)
        for m in metrics:
            table.add_column(m, justify="right", no_wrap=True)
        for m in reference_metrics:
            table.add_column(m, justify="right", no_wrap=True)
        for col in ("encode docs", "weights", "index", "gates"):
            table.add_column(col, justify="right", no_wrap=True)
        for name, v in ds.variants.items():
            info = variants_info.get(name)
            row = [name + (" (ref)" if v.role == "reference" else "")]
            row += [_metric_cell(v.metrics.get(m), confidence) for m in metrics]
            ref_metrics = v.reference_metrics or {}
            row += [_fmt(ref_metrics[m].value if m in ref_metrics else None)
                    for m in reference_metrics]
            row += [_rate(v.encode), _mib(info.weight_bytes if info else None),
                    _mib(v.index_record.bytes if v.index_record else None)]
            gate = v.gate
            row.append("" if gate is None else "ungated" if info and info.verdict == "ungated"
                       else "[green]pass[/green]" if gate.passed else "[red]FAIL[/red]")
            table.add_row(*row)
        console.print(table)
        for name, v in ds.variants.items():
            _failed(console, name, list(v.gate.checks) if v.gate is not None else [])
    _print_losses(console, run)
    _print_sweeps(console, run)
    for name, info in variants_info.items():
        # parity and pooled (suite) gates belong to the variant, not to one dataset
        _failed(console, name, info.suite_checks or [])
    for w in summary.warnings:
        console.print(f"[yellow]warning:[/yellow] {escape(w)}", soft_wrap=True)
    for name, info in variants_info.items():
        if info.peak_rss_mb:
            console.print(f"  {name}: startup {info.startup_s or 0:.1f}s, total "
                          f"{info.total_s or 0:.1f}s, process peak RSS "
                          f"{info.peak_rss_mb:.0f} MiB"
                          + (f", engine processes {info.children_peak_rss_mb:.0f} MiB"
                             if info.children_peak_rss_mb else ""))
    print_pipelines(console, pipeline_views(summary))
    word = gates_word(summary)
    colour = {"PASSED": "green", "FAILED": "red"}.get(word, "yellow")
    verdict = f"[{colour}]{word}[/{colour}]"
    console.print(f"gates {verdict}; results in {escape(str(run.root))}")
