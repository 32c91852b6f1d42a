"""The HTML report's section for swept search-time parameters (result kind ``sweep``,
issue 30): per candidate, recall@10 against p50 latency per query, one point per value,
the cheapest certified value marked, and the rows the console and markdown print
(:mod:`evalq.report.sweeps`). The plot is a plotly figure placed like every other
figure of the report (:meth:`evalq.report.html.Page.figure`: plotly draws it as inline
SVG), so the report keeps one plotting path.
"""

from __future__ import annotations

from markupsafe import Markup

from evalq.report.html import Page, note, plot_text, table
from evalq.report.retrieval_sections import ds_heading, plotly_go, variant_colour
from evalq.report.runview import RunView
from evalq.report.sections import KIND_DETECTORS, section
from evalq.report.sweeps import SWEEP_HEADERS, SWEEP_NOTE, summary_sweeps, sweep_rows

KIND = "sweep"
KIND_DETECTORS[KIND] = lambda run: bool(summary_sweeps(run.summary))


def sweep_figure(run: RunView, ds: str) -> object:
    """recall@10 (y) against p50 ms (x) of every sweep on ``ds``: a line per candidate,
    a marker per value (hollow: not certified), a star on the cheapest certified one."""
    go = plotly_go()
    fig = go.Figure()
    for ds_name, name, sweep in summary_sweeps(run.summary):
        if ds_name != ds:
            continue
        points = [p for p in sweep.points if p.p50_ms is not None]
        colour = variant_colour(run, name) if name in run.variants else "#444"
        fig.add_trace(go.Scatter(
            x=[p.p50_ms for p in points], y=[p.recall_at_10 for p in points],
            mode="lines+markers+text", name=plot_text(name),
            text=[plot_text(f"{p.value:g}") for p in points], textposition="top center",
            line={"color": colour},
            marker={"size": 9, "color": [colour if p.certified else "white" for p in points],
                    "line": {"width": 2, "color": colour}},
            hovertemplate=plot_text(f"{name} · {sweep.parameter}=") + "%{text}<br>p50 "
            "%{x:.3f} ms<br>recall@10 %{y:.4f}<extra></extra>"))
        best = [p for p in points if sweep.cheapest is not None and p.value == sweep.cheapest]
        if best:
            fig.add_trace(go.Scatter(
                x=[best[0].p50_ms], y=[best[0].recall_at_10], mode="markers",
                name=plot_text(f"{name}: cheapest certified"),
                marker={"symbol": "star", "size": 18, "color": colour,
                        "line": {"width": 1, "color": "#222"}},
                hovertemplate=plot_text(f"cheapest certified: {sweep.parameter}="
                                        f"{best[0].value:g}") + "<extra></extra>"))
    fig.update_xaxes(title_text="p50 query latency (ms)")
    fig.update_yaxes(title_text="recall@10 vs exact kNN")
    return fig


@section("sweep", "Search-time parameter sweep", kind=KIND, order=36)
def sweep_section(run: RunView, page: Page) -> Markup:
    rows = sweep_rows(run)
    parts = [note(SWEEP_NOTE)]
    for ds in run.datasets:
        mine = [r for r in rows if r.dataset == ds]
        if not mine:
            continue
        parts += [ds_heading(run, ds), page.figure(sweep_figure(run, ds), height=420),
                  table(SWEEP_HEADERS[1:], [r.cells()[1:] for r in mine],
                        numeric=(2, 3, 4, 5, 6, 7))]
    return Markup("").join(parts)
