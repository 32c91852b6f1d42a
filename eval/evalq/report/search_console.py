"""The console's view of a grid search (issue 31): every combination with its cost,
quality, explore verdict, mark and the level it was confirmed at, the Pareto frontier
ticked, and the one recommendation.

Reads ``summary.search`` only (:class:`evalq.results.searchpart.SearchSummary`), so the
console and the other reports cannot disagree. Returns text; the app prints it.
"""

from __future__ import annotations

from evalq.results.searchpart import SearchPoint, SearchSummary

HEADERS = ("combination", "cost", "quality", "explore", "mark", "α", "frontier")


def cost_text(cost: str, value: float) -> str:
    """A cost as the search minimized it, in the unit a reader expects: bytes in KiB or
    MiB, a throughput back as a rate (the search minimizes its inverse), dollars."""
    if cost.endswith("_bytes"):
        return (f"{value / 2**20:.2f} MiB" if value >= 2**20 else f"{value / 1024:.1f} KiB")
    if cost.endswith("_per_s"):
        return f"{1.0 / value:.0f}/s" if value > 0 else "—"
    return f"${value:.4f}"


def _row(point: SearchPoint, cost: str) -> tuple[str, ...]:
    return (point.name, cost_text(cost, point.cost),
            "—" if point.quality is None else f"{point.quality:.4f}", point.explore,
            point.mark, "—" if point.alpha is None else f"{point.alpha:.4g}",
            "✓" if point.frontier else "")


def search_text(search: SearchSummary) -> str:
    """The table (cheapest first) and the recommendation line."""
    rows = [HEADERS] + [_row(p, search.cost) for p in
                        sorted(search.points, key=lambda p: (p.cost, p.name))]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADERS))]
    right = {1, 2, 5}
    grid = " × ".join(str(len(v)) for v in search.axes.values())
    lines = [f"search: {len(search.points)} combinations ({grid}), "
             f"cost {search.cost}, quality {search.quality} on "
             f"{search.split.explore_queries} explore queries; Holm over "
             f"{search.survivors} survivor(s) on {search.split.confirm_queries} confirm "
             f"queries, family-wise one-sided α {search.alpha:g}; "
             f"{search.encodings} encoding(s)"]
    for r in rows:
        lines.append("  " + "  ".join(c.rjust(w) if i in right else c.ljust(w)
                                      for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    if search.recommendation is not None:
        best = next(p for p in search.points if p.name == search.recommendation)
        lines.append(f"search recommendation: {best.name} ({best.weights} weights, {best.vectors} "
                     f"vectors, {best.dims} dims): {cost_text(search.cost, best.cost)}, "
                     f"{search.quality} {best.quality:.4f}, certified at one-sided α "
                     f"{best.alpha:.4g}")
    else:
        lines.append("search recommendation: none — no combination was certified (exit 1)")
    return "\n".join(lines)
