"""The history page: several runs of one recipe (one per commit, machine or library
version), ordered by the manifest's start time and git revision.

Every gated figure is drawn over the runs as stored in each run's gate check (Δ with its
CI for an allowed-drop gate, the mean with its CI or the percentile for a floor) with the
gate's threshold beside it, then the cost figures and the verdicts. Nothing is
recomputed: a run's point is what that run decided.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from markupsafe import Markup

from evalq.core.errors import InputError
from evalq.report.html import Page, note, plot_text, table
from evalq.report.runview import RunView, class_warning, finite
from evalq.report.verdict import candidate_verdicts, costs
from evalq.results.parts import GateFigures

_STATUS_CSS = {"ship": "pass", "fail": "fail", "inconclusive": "inconclusive"}


def order_runs(runs: Sequence[RunView]) -> list[RunView]:
    names = sorted({r.name for r in runs})
    if len(names) > 1:
        listing = "; ".join(f"{r.root} is {r.name!r}" for r in runs)
        raise InputError(message="a history needs runs of one recipe, these are of "
                         f"{len(names)} ({listing})", field="RESULTS",
                         fix="pass folders of the same recipe, or one folder for its report")
    return sorted(runs, key=lambda r: (r.started, r.git_revision, str(r.root)))


def _gate_point(figures: GateFigures) -> tuple[float | None, float | None, float | None,
                                                float | None, str] | None:
    """(value, ci_low, ci_high, threshold, what) of one stored gate check."""
    stored = figures.model_fields_set
    if "delta" in stored:
        margin = finite(figures.margin)
        return (finite(figures.delta), finite(figures.ci_low), finite(figures.ci_high),
                None if margin is None else -margin, "Δ")
    if "mean" in stored:
        return (finite(figures.mean), finite(figures.ci_low), finite(figures.ci_high),
                finite(figures.min), "mean")
    if {"value", "stat"} <= stored:
        return finite(figures.value), None, None, finite(figures.min), str(figures.stat)
    return None


def _gate_series(runs: list[RunView]) -> dict[tuple[str, str], dict[str, list[Any]]]:
    """{(dataset, gate label): {variant: [(run index, point), ...]}}."""
    series: dict[tuple[str, str], dict[str, list[Any]]] = {}
    for i, run in enumerate(runs):
        for ds in run.datasets:
            for name in run.candidates:
                for check in run.gate_checks(ds, name):
                    point = _gate_point(check.read_figures)
                    if point is None:
                        continue
                    key = (ds, check.gate)
                    series.setdefault(key, {}).setdefault(name, []).append(
                        (i, point, check.verdict))
    return series


def render_history(runs_in: Sequence[RunView]) -> str:
    runs = order_runs(runs_in)
    labels = [plot_text(f"{i}. {r.label}") for i, r in enumerate(runs, start=1)]
    page = Page(f"evalq history · {runs[0].name}")
    variants: list[str] = []
    for r in runs:
        variants += [v for v in r.candidates if v not in variants]
    palette = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3",
               "#8c8c8c", "#ccb974", "#64b5cd")

    def colour(name: str) -> str:
        return palette[variants.index(name) % len(palette)] if name in variants else "#333"

    notes = [note(f"{r.root}: {n}") for r in runs for n in r.notes]
    mixed = class_warning({f"run {i}": r.numerics_class for i, r in enumerate(runs, 1)})
    if mixed is not None:  # points of different classes differ by CPU as well as by change
        notes.append(note(mixed))
    gate_parts = [page.figure(_gate_figure(ds, label, by_variant, labels, colour))
                  for (ds, label), by_variant in _gate_series(runs).items()]
    if not gate_parts:
        gate_parts.append(note("no stored gate figures in these runs"))
    cost_html = page.figure(_cost_figure(runs, labels, variants, colour), height=620)

    sections = [("runs", "Runs", Markup("").join([*notes, _runs_table(runs)])),
                ("gates-history", "Gated figures over runs", Markup(
                    "<p class=\"muted\">Each point is what that run stored for the gate "
                    "(bars: its CI); the dashed red line is the gate's threshold "
                    "(−margin for an allowed drop, the floor for a minimum).</p>{}").format(
                    Markup("").join(gate_parts))),
                ("cost-history", "Cost over runs", cost_html),
                ("verdict-history", "Verdicts over runs", _verdict_grid(runs, variants))]
    body = Markup("").join(Markup('<section id="{}"><h2>{}</h2>{}</section>').format(*s)
                           for s in sections)
    header = Markup("<header><h1>evalq history · {}</h1><p>{} runs, {} to {}</p></header>"
                    ).format(runs[0].name, len(runs), runs[0].label, runs[-1].label)
    return page.render(header, [(s[0], s[1]) for s in sections], body)


def _runs_table(runs: list[RunView]) -> Markup:
    """One row per run: its label, revision, evalq version, numerics class, gate outcome
    and folder."""
    rows = []
    for r in runs:
        s = r.summary
        passed = ("no summary", "muted") if s is None else (
            ("passed", "pass") if s.passed else ("failed", "fail"))
        rows.append([r.label, r.git_revision, r.manifest.evalq_version or "?",
                     r.numerics_class or "unrecorded", passed,
                     str(len(s.failed_gates if s is not None else [])), str(r.root)])
    return table(["run", "git revision", "evalq", "numerics class", "gates", "failed gates",
                  "folder"], rows)


def _gate_figure(ds: str, label: str, by_variant: dict[str, list[Any]], labels: list[str],
                 colour: Callable[[str], str]) -> Any:
    """One gate's stored figure over the runs, a line per variant, with its threshold."""
    import plotly.graph_objects as go

    fig = go.Figure()
    what = "value"
    thresholds: dict[int, float] = {}
    for name, points in by_variant.items():
        xs, ys, up, down, text = [], [], [], [], []
        for i, (value, low, high, threshold, kind), verdict in points:
            what = kind
            if threshold is not None:
                thresholds.setdefault(i, threshold)
            if value is None:
                continue
            xs.append(labels[i])
            ys.append(value)
            up.append(0.0 if high is None else high - value)
            down.append(0.0 if low is None else value - low)
            text.append(plot_text(verdict))
        fig.add_trace(go.Scatter(
            x=xs, y=ys, mode="lines+markers", name=plot_text(name), text=text,
            marker={"color": colour(name), "size": 8},
            error_y={"type": "data", "symmetric": False, "array": up, "arrayminus": down},
            hovertemplate="%{x}<br>%{y:.4f} (%{text})<extra>" + plot_text(name)
            + "</extra>"))
    if thresholds:
        ordered = sorted(thresholds)
        fig.add_trace(go.Scatter(
            x=[labels[i] for i in ordered], y=[thresholds[i] for i in ordered],
            mode="lines+markers", name="gate threshold",
            line={"dash": "dash", "color": "#cf222e", "width": 2},
            marker={"symbol": "line-ew-open", "size": 14, "color": "#cf222e"}))
    fig.update_layout(title=plot_text(f"{label} · {ds}"), yaxis_title=plot_text(what),
                      xaxis={"type": "category"})
    return fig


def _cost_figure(runs: list[RunView], labels: list[str], variants: list[str],
                 colour: Callable[[str], str]) -> Any:
    """Weights, index size, throughput and peak memory over the runs, a line per model."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    cost_axes = [("weight_bytes", "weights (MiB)", 1 / 2**20),
                 ("index_bytes", "index (MiB)", 1 / 2**20),
                 ("throughput", "documents/s", 1.0), ("peak_rss_mb", "peak RSS (MiB)", 1.0)]
    fig = make_subplots(rows=2, cols=2, subplot_titles=[a[1] for a in cost_axes],
                        vertical_spacing=0.18)
    everyone = [runs[-1].reference, *variants] if runs[-1].reference else variants
    for k, (key, _title, scale) in enumerate(cost_axes):
        for name in everyone:
            xs, ys = [], []
            for i, r in enumerate(runs):
                if not r.ran(name):
                    continue
                value = costs(r, name).get(key)
                if value is not None:
                    xs.append(labels[i])
                    ys.append(value * scale)
            if xs:
                fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers",
                                         name=plot_text(name), legendgroup=plot_text(name),
                                         showlegend=k == 0,
                                         marker={"color": colour(name)}),
                              row=k // 2 + 1, col=k % 2 + 1)
    fig.update_xaxes(type="category")
    return fig


def _verdict_grid(runs: list[RunView], variants: list[str]) -> Markup:
    """Runs down, variants across: each variant's status in each run."""
    grid_rows = []
    for r in runs:
        statuses = {v.name: v.status for v in candidate_verdicts(r)}
        row: list[Any] = [r.label]
        for name in variants:
            status = statuses.get(name, "absent")
            row.append((status, _STATUS_CSS.get(status, "muted")))
        grid_rows.append(row)
    return table(["run", *variants], grid_rows)
