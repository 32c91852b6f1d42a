"""What `evalq run --wide` prints: one table per dataset, then the gate verdicts with
reasons (the default is the compact view of ``report.compact``).

Reads the summary only (never recomputes), so the console, the JSON and the JUnit report
cannot disagree.
"""

from __future__ import annotations

from typing import Any

from rich.markup import escape

from evalq.report.compact import print_compact
from evalq.report.pipelines import pipeline_views, print_pipelines
from evalq.report.runview import RunView, host_text


def _fmt(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _metric_cell(entry: dict[str, Any], confidence: float | None = None) -> str:
    vs = entry.get("vs_reference")
    value = _fmt(entry.get("value"))
    if not vs:
        return value
    # a gate's own confidence, when it differs from the table's
    own = vs.get("confidence")
    at = f"@{own * 100:g}%" if own is not None and own != confidence else ""
    low, high = vs.get("ci_low"), vs.get("ci_high")
    # No interval (a single query, or values that are all equal): say so, never crash.
    interval = (f"[{low:+.3f},{high:+.3f}]" if low is not None and high is not None
                else "[no interval]")
    return f"{value} {vs['delta']:+.4f} {interval}{at}"


def _rate(encode: dict[str, Any]) -> str:
    docs = encode.get("documents", {})
    if not docs.get("texts_per_s"):
        return "cached"
    return f"{docs['texts_per_s']:.0f}/s {docs['tokens_per_s'] / 1000:.1f}k tok/s"


def _mib(n: int | None) -> str:
    return f"{n / 2**20:.1f}M" if n else "—"


COMPACT_WIDTH = 100


def print_run_table(run: RunView, wide: bool = False) -> None:
    """The table of a finished run, read from the folder it wrote (``RunView.load``)."""
    if not wide:
        print_compact(run, width=COMPACT_WIDTH)
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(width=220)
    summary = run.summary or {}
    console.print(f"host: {escape(host_text(run.host))}", highlight=False)
    recipe = run.recipe
    metrics, reference_metrics = recipe.get("metrics", []), recipe.get("reference_metrics", [])
    confidence = (recipe.get("stats") or {}).get("confidence", 0.95)
    variants_info = summary.get("variants", {})
    conf = f"{confidence * 100:g}%"
    for ds_name, ds in summary.get("datasets", {}).items():
        table = Table(title=f"{run.name} · {ds_name} · {ds['queries']} queries, "
                      f"{ds.get('documents')} documents · value Δ [{conf} CI] vs "
                      f"{summary['reference']}", title_justify="left")
        table.add_column("variant", no_wrap=True)
        for m in metrics:
            table.add_column(m, justify="right", no_wrap=True)
        for m in reference_metrics:
            table.add_column(m, justify="right", no_wrap=True)
        for col in ("encode docs", "weights", "index", "gates"):
            table.add_column(col, justify="right", no_wrap=True)
        for name, v in ds["variants"].items():
            info = variants_info.get(name, {})
            row = [name + (" (ref)" if v["role"] == "reference" else "")]
            row += [_metric_cell(v["metrics"].get(m, {}), confidence) for m in metrics]
            row += [_fmt(v.get("reference_metrics", {}).get(m, {}).get("value"))
                    for m in reference_metrics]
            row += [_rate(v.get("encode", {})), _mib(info.get("weight_bytes")),
                    _mib((v.get("index") or {}).get("bytes"))]
            gate = v.get("gate")
            row.append("" if gate is None else "ungated" if info.get("verdict") == "ungated"
                       else "[green]pass[/green]" if gate["passed"] else "[red]FAIL[/red]")
            table.add_row(*row)
        console.print(table)
        for name, v in ds["variants"].items():
            for check in (v.get("gate") or {}).get("checks", []):
                if not check["passed"]:
                    console.print(f"  [red]{check['verdict']}[/red] {escape(name)}: "
                                  f"{escape(check['gate'])} — {escape(check['reason'])}",
                                  soft_wrap=True)
    for name, info in variants_info.items():
        # parity and pooled (suite) gates belong to the variant, not to one dataset
        for check in info.get("suite_checks", []):
            if not check["passed"]:
                console.print(f"  [red]{check['verdict']}[/red] {escape(name)}: "
                              f"{escape(check['gate'])} — {escape(check['reason'])}",
                              soft_wrap=True)
    for w in summary.get("warnings", []):
        console.print(f"[yellow]warning:[/yellow] {escape(w)}", soft_wrap=True)
    for name, info in variants_info.items():
        if info.get("peak_rss_mb"):
            console.print(f"  {name}: startup {info.get('startup_s') or 0:.1f}s, total "
                          f"{info.get('total_s') or 0:.1f}s, process peak RSS "
                          f"{info['peak_rss_mb']:.0f} MiB"
                          + (f", engine processes {info['children_peak_rss_mb']:.0f} MiB"
                             if info.get("children_peak_rss_mb") else ""))
    print_pipelines(console, pipeline_views(summary))
    verdict = "[green]PASSED[/green]" if summary.get("passed") else "[red]FAILED[/red]"
    console.print(f"gates {verdict}; results in {escape(str(run.root))}")
