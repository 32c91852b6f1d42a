"""The HTML report's section for a grid search (result kind ``search``, issue 31): the
frontier plot of cost against quality, every point marked certified / failed /
inconclusive / not confirmed, the frontier connected and the recommendation labelled; the
split and error-control line; and the table of points. Only a folder whose summary has a
``search`` part gets it. The wording is :mod:`evalq.report.search`'s, shared with markdown.
"""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from evalq.report.html import Page, note, plot_text, table
from evalq.report.retrieval_sections import plotly_go
from evalq.report.runview import RunView
from evalq.report.search import (
    HEADERS,
    MARK_COLUMN,
    MARK_NOTE,
    MARKS,
    NUMERIC,
    encodings_line,
    error_control_line,
    ordered_points,
    point_cells,
    recommendation_text,
)
from evalq.report.sections import KIND_DETECTORS, section
from evalq.results.searchpart import SearchSummary

KIND = "search"
KIND_DETECTORS[KIND] = lambda run: run.summary is not None and run.summary.search is not None

# One marker per mark: shape and colour both differ, so the plot reads in greyscale too.
MARKERS: dict[str, dict[str, Any]] = {
    "certified": {"symbol": "circle", "color": "#1a7f37"},
    "failed": {"symbol": "x", "color": "#cf222e"},
    "inconclusive": {"symbol": "triangle-up", "color": "#9a6700"},
    "not confirmed": {"symbol": "circle-open", "color": "#6e7781"},
}
MARK_CSS = {"certified": "pass", "failed": "fail", "inconclusive": "inconclusive",
            "not confirmed": "muted"}


def frontier_figure(search: SearchSummary) -> Any:
    """The plotly figure: one trace per mark (the legend names them), the frontier as a
    line through its points cheapest first, and the recommendation as a labelled star."""
    go = plotly_go()
    fig = go.Figure()
    drawn = {p.name: p for p in search.points if p.quality is not None}
    for mark in MARKS:
        points = [p for p in drawn.values() if p.mark == mark]
        if not points:
            continue
        fig.add_trace(go.Scatter(
            x=[p.cost for p in points], y=[p.quality for p in points], mode="markers",
            name=plot_text(f"{mark} ({len(points)})"), legendgroup=mark,
            marker={"size": 11, "line": {"width": 1.5, "color": MARKERS[mark]["color"]},
                    **MARKERS[mark]},
            text=[plot_text(p.name) for p in points],
            hovertemplate="%{text}<br>" + plot_text(mark) + "<br>cost %{x:.4g}<br>"
            + plot_text(search.quality) + " %{y:.4f}<extra></extra>"))
    line = [drawn[name] for name in search.frontier if name in drawn]
    if line:
        fig.add_trace(go.Scatter(
            x=[p.cost for p in line], y=[p.quality for p in line], mode="lines",
            name="Pareto frontier", line={"dash": "dot", "color": "#555", "width": 1.5},
            hoverinfo="skip"))
    best = drawn.get(search.recommendation or "")
    if best is not None:
        fig.add_trace(go.Scatter(
            x=[best.cost], y=[best.quality], mode="markers",
            name=plot_text(f"recommendation: {best.name}"),
            marker={"symbol": "star", "size": 22, "color": "rgba(0,0,0,0)",
                    "line": {"width": 2, "color": "#0969da"}},
            hoverinfo="skip"))
        fig.add_annotation(x=best.cost, y=best.quality, text=plot_text(best.name),
                           showarrow=True, arrowhead=2, ax=40, ay=-36,
                           font={"color": "#0969da"})
    costs = [p.cost for p in drawn.values() if p.cost > 0]
    log = bool(costs) and min(costs) > 0 and max(costs) / min(costs) > 100
    fig.update_layout(xaxis_title=plot_text(f"cost: {search.cost}"),
                      yaxis_title=plot_text(f"{search.quality} (explore queries)"),
                      legend={"title": {"text": "mark"}})
    if log:
        fig.update_xaxes(type="log")
    return fig


@section("search", "Grid search: cost against quality", kind=KIND, order=15)
def search_section(run: RunView, page: Page) -> Markup:
    search = run.summary.search if run.summary is not None else None
    if search is None:
        return note("no search in summary.json")
    parts = [Markup('<p class="banner {}"><strong>Recommendation:</strong> {}</p>').format(
                 "ship" if search.recommendation else "none", recommendation_text(search)),
             Markup('<p class="error-control">{}</p>').format(error_control_line(search)),
             Markup('<p class="muted">{}. Quality is measured on the explore queries; '
                    "marks come from the confirm queries only. {}.</p>").format(
                 encodings_line(search),
                 "; ".join(f"{m}: {t}" for m, t in MARK_NOTE.items()))]
    if any(p.quality is not None for p in search.points):
        parts.append(page.figure(frontier_figure(search), height=460))
    unplotted = [p.name for p in search.points if p.quality is None]
    if unplotted:
        parts.append(note("not plotted (no quality measured): " + ", ".join(unplotted)))
    rows: list[list[Any]] = []
    for p in ordered_points(search):
        cells: list[Any] = list(point_cells(p, search))
        cells[0] = Markup('<span class="variant">{}</span>').format(cells[0])
        cells[MARK_COLUMN] = (cells[MARK_COLUMN], MARK_CSS[p.mark])
        rows.append(cells)
    parts.append(table(HEADERS, rows, numeric=NUMERIC))
    return Markup("").join(parts)
