"""A grid search's results as the reports show them: the split and error-control line, the
recommendation sentence and the table of points, from the summary's typed ``search`` part
(:class:`evalq.results.searchpart.SearchSummary`).

One place for the wording, so the HTML section (:mod:`evalq.report.search_sections`) and
the markdown job summary (:mod:`evalq.report.markdown`) cannot say different things.
"""

from __future__ import annotations

from evalq.results.searchpart import SearchPoint, SearchSummary

MARKS = ("certified", "failed", "inconclusive", "not confirmed")
MARK_NOTE = {
    "certified": "passed in the confirm family (Holm)",
    "failed": "confirmed, and its drop exceeds the margin",
    "inconclusive": "confirmed, and not shown to be within the margin",
    "not confirmed": "pruned on the explore queries: never tested, never certified",
}
HEADERS = ["point", "weights", "vectors", "dims", "index", "recall@10 vs exact", "cost",
           "quality", "explore", "mark", "decided at α", "frontier", "why"]
NUMERIC = (3, 5, 6, 7, 10)
MARK_COLUMN = HEADERS.index("mark")


def _num(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}g}"


def error_control_line(search: SearchSummary) -> str:
    """The split and the correction in one sentence, with the resulting per-test level."""
    split = search.split
    k = search.survivors
    head = (f"explore {split.explore_queries} / confirm {split.confirm_queries} queries, "
            f"seed {split.seed}, ")
    if k == 0:
        return head + (f"no survivor to confirm (every point failed on the explore "
                       f"queries), family-wise α = {search.alpha:g}")
    return head + (f"{search.correction.capitalize()} over {k} survivor"
                   f"{'s' if k != 1 else ''}, family-wise α = {search.alpha:g}, first-round "
                   f"per-test α = {search.alpha:g}/{k} = {search.alpha / k:.3g}")


def recommendation_text(search: SearchSummary) -> str:
    """The one recommendation, or why there is none."""
    if search.recommendation is None:
        return ("nothing certified: no configuration of the grid is shown to stay within "
                "the margin; keep the reference")
    point = next((p for p in search.points if p.name == search.recommendation), None)
    where = "" if point is None else (
        f" ({point.weights}, vectors {point.vectors}, {point.dims} dims; {search.cost} "
        f"{_num(point.cost)}, {search.quality} {_num(point.quality)})")
    return f"{search.recommendation}{where}: the cheapest certified point"


def ordered_points(search: SearchSummary) -> list[SearchPoint]:
    """Frontier points first in frontier order (cheapest first), then the rest by cost."""
    rank = {name: i for i, name in enumerate(search.frontier)}
    return sorted(search.points, key=lambda p: (p.name not in rank, rank.get(p.name, 0),
                                                p.cost, p.name))


def point_cells(point: SearchPoint, search: SearchSummary) -> list[str]:
    """One row of the table of points (plain text; each report escapes it its own way)."""
    return [point.name, point.weights, point.vectors, str(point.dims), point.index or "exact",
            _num(point.recall_at_10), _num(point.cost), _num(point.quality), point.explore,
            point.mark,
            _num(point.alpha, 3), "yes" if point.name in search.frontier else "",
            "; ".join(point.reasons)]


def encodings_line(search: SearchSummary) -> str:
    return (f"{len(search.points)} points over "
            + " × ".join(f"{len(v)} {k}" for k, v in search.axes.items())
            + f"; {search.encodings} encodings spent, the grid needs at least "
            f"{search.minimum_encodings}")
