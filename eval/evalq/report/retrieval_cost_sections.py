"""The cost and setup sections of a retrieval run: quality against cost (with its Pareto
front), embedding drift (cosine between reference and candidate vectors), encoding
settings and provenance. The verdict, metric table and per-query view are in
:mod:`evalq.report.retrieval_sections`. Each renders from stored results only.
"""

from __future__ import annotations

import json
from typing import Any

from markupsafe import Markup

from evalq.report.html import Page, fmt, note, plot_text, table
from evalq.report.retrieval_sections import (
    KIND,
    STATUS_TEXT,
    ds_heading,
    plotly_go,
    variant_colour,
)
from evalq.report.reuse import reuse_notes
from evalq.report.runview import RunView, finite
from evalq.report.sections import section
from evalq.report.verdict import candidate_verdicts, costs
from evalq.results.schema import RecipeRecordVectors

# -- quality against cost --------------------------------------------------------------

def pareto_front(points: list[tuple[str, float, float]], higher_cost_better: bool) -> set[str]:
    """Names of the points no other point dominates (at most the same cost and at least
    the same quality, better in one). ``points`` are (name, cost, quality)."""
    front = set()
    for name, cost, quality in points:
        dominated = False
        for other, c2, q2 in points:
            if other == name:
                continue
            cheaper_or_equal = c2 >= cost if higher_cost_better else c2 <= cost
            strictly = (c2 > cost if higher_cost_better else c2 < cost) or q2 > quality
            if cheaper_or_equal and q2 >= quality and strictly:
                dominated = True
                break
        if not dominated:
            front.add(name)
    return front


@section("quality-cost", "Quality against cost", kind=KIND, order=30)
def quality_cost_section(run: RunView, page: Page) -> Markup:
    metric = run.headline_metric()
    if run.summary is None or metric is None:
        return note("no summary.json or no metric: nothing to place against cost")
    from plotly.subplots import make_subplots

    go = plotly_go()
    statuses = {v.name: v.status for v in candidate_verdicts(run)}
    axes = [("weight_bytes", "weights (MiB)", 1 / 2**20, False),
            ("index_bytes", "index (MiB)", 1 / 2**20, False),
            ("throughput", "encode throughput (documents/s)", 1.0, True)]
    parts = [Markup("<p class=\"muted\">One point per variant: Δ {} against the reference "
                    "(bars: CI) by cost. Larger markers with a line: the Pareto front "
                    "(no other variant is cheaper and at least as good). Colour and "
                    "hover give the verdict.</p>").format(metric)]
    for ds in run.datasets:
        fig = make_subplots(rows=1, cols=3, shared_yaxes=True, horizontal_spacing=0.05,
                            subplot_titles=[a[1] for a in axes])
        missing_axes = []
        for col, (key, _label, scale, higher) in enumerate(axes, start=1):
            points = []
            for name in run.variants:
                entry = run.entry(ds, name)
                value = costs(run, name).get(key)
                if entry is None or value is None:
                    continue
                m = entry.metrics.get(metric)
                vs = m.vs_reference if m is not None else None
                delta = 0.0 if name == run.reference else finite(vs.delta if vs else None)
                if delta is None:
                    continue
                points.append((name, value * scale, delta, vs))
            if not points:
                missing_axes.append(key)
                continue
            front = pareto_front([(n, c, q) for n, c, q, _ in points], higher)
            for name, cost, delta, vs in points:
                status = "reference" if name == run.reference else STATUS_TEXT.get(
                    statuses.get(name, ""), "")
                low = finite(vs.ci_low) if vs is not None else None
                high = finite(vs.ci_high) if vs is not None else None
                error = None
                if low is not None and high is not None:
                    error = {"type": "data", "symmetric": False, "array": [high - delta],
                             "arrayminus": [delta - low], "thickness": 1}
                fig.add_trace(go.Scatter(
                    x=[cost], y=[delta], mode="markers", name=plot_text(name),
                    legendgroup=plot_text(name), showlegend=col == 1, error_y=error,
                    marker={"size": 14 if name in front else 9, "color": variant_colour(run, name),
                            "symbol": "diamond" if name in front else "circle",
                            "line": {"width": 1, "color": "#222"}},
                    hovertemplate=plot_text(f"{name} · {status}") + "<br>cost %{x:.4g}"
                    "<br>Δ %{y:.4f}<extra></extra>"), row=1, col=col)
            ordered = sorted((p for p in points if p[0] in front),
                             key=lambda p: p[1], reverse=higher)
            fig.add_trace(go.Scatter(
                x=[p[1] for p in ordered], y=[p[2] for p in ordered], mode="lines",
                line={"dash": "dot", "color": "#555", "width": 1}, showlegend=col == 1,
                name="Pareto front", legendgroup="front", hoverinfo="skip"), row=1, col=col)
        fig.update_yaxes(title_text=plot_text(f"Δ {metric}"), row=1, col=1)
        parts += [ds_heading(run, ds), page.figure(fig, height=420)]
        if missing_axes:
            parts.append(note("not plotted (figure not stored, or every chunk was cached so "
                              f"no throughput was timed): {', '.join(missing_axes)}"))
    return Markup("").join(parts)


# -- embedding drift -------------------------------------------------------------------

@section("cosines", "Embedding drift: cosine(reference, candidate)", kind=KIND, order=50)
def cosine_section(run: RunView, page: Page) -> Markup:
    go = plotly_go()
    parts: list[Markup] = [Markup(
        "<p class=\"muted\">Per text: the cosine between the reference's and the candidate's "
        "embedding of the same query or document (documents as the index stores them).</p>")]
    for ds in run.datasets:
        parts.append(ds_heading(run, ds))
        fig = go.Figure()
        missing = []
        rows = []
        legend_shown: set[str] = set()
        for name in run.candidates:
            per_text = run.per_text(ds, name)
            entry = run.entry(ds, name)
            vectors = entry.vectors if entry is not None else None
            if vectors is not None:
                for role, s in (("query", vectors.query), ("document", vectors.document)):
                    rows.append([name, role, fmt(finite(s.mean), 6), fmt(finite(s.p1), 6),
                                 fmt(finite(s.min), 6), str(s.candidate_nan),
                                 str(s.candidate_inf)])
            if per_text is None:
                if run.ran(name):
                    missing.append(name)
                continue
            for role, colour in (("query", "#4c72b0"), ("document", "#dd8452")):
                values = [v for v in (per_text.get(role) or {}).values() if v is not None]
                if not values:
                    continue
                label = "queries" if role == "query" else "documents"
                fig.add_trace(go.Box(
                    x=[plot_text(name)] * len(values), y=values, name=label,
                    legendgroup=role, showlegend=role not in legend_shown,
                    marker={"color": colour, "size": 3}, boxpoints="outliers"))
                legend_shown.add(role)
        if fig.data:
            fig.update_layout(boxmode="group", yaxis_title="cosine to the reference")
            parts.append(page.figure(fig, height=420))
        if rows:
            parts.append(table(["variant", "texts", "mean", "p1", "min", "NaN", "Inf"], rows,
                               numeric=[2, 3, 4, 5, 6]))
        if missing:
            parts.append(note(f"no per-text cosines stored for {', '.join(missing)} "
                              f"(per_text/{ds}/ is missing them): distribution not drawn"))
    return Markup("").join(parts)


# -- settings ----------------------------------------------------------------------------

_SETTING_KEYS = ("pooling", "normalize", "max_length", "truncation_side", "query_prefix",
                 "document_prefix")


def _settings_row(run: RunView, name: str) -> dict[str, str]:
    info = run.manifest_variant(name)
    backend = run.backend(name)
    settings = (info.settings if info is not None else {}) or backend.settings or {}
    quant = backend.quantization_record
    recipe_v = run.recipe.variant(name)
    vectors = (recipe_v.vectors if recipe_v is not None else None) or RecipeRecordVectors()
    row = {k: json.dumps(settings.get(k)) if k in settings else "—" for k in _SETTING_KEYS}
    row["backend"] = str(backend.backend or (recipe_v and recipe_v.backend) or "—")
    row["dtype"] = str(backend.dtype or (recipe_v and recipe_v.dtype) or "—")
    method = (quant.method if quant is not None else None) or "—"
    bits = f" {quant.bits}-bit" if quant is not None and quant.bits else ""
    params = (quant.params if quant is not None else None) or {}
    row["quantization"] = f"{method}{bits}" + (f" {json.dumps(params, sort_keys=True)}"
                                               if params else "")
    row["vectors"] = vectors.quantize + (f", rescore ×{vectors.rescore}"
                                         if vectors.rescore else "")
    return row


@section("settings", "Encoding settings", kind=KIND, order=60)
def settings_section(run: RunView, page: Page) -> Markup:
    names = [v for v in run.variants if run.ran(v)]
    if not names:
        return note("no variant finished: no settings recorded")
    rows_by = {n: _settings_row(run, n) for n in names}
    keys = [*_SETTING_KEYS, "backend", "dtype", "quantization", "vectors"]
    ref = rows_by.get(run.reference, {})
    rows = []
    for n in names:
        row: list[Any] = [Markup("<span class=\"variant\">{}</span>").format(n)]
        for k in keys:
            value = rows_by[n][k]
            row.append((value, "differs") if n != run.reference and value != ref.get(k)
                       else value)
        rows.append(row)
    parts = [Markup("<p class=\"muted\">Highlighted: differs from the reference. A "
                    "difference in pooling, normalization, truncation or prefixes is not "
                    "quantization, and the usual cause of a broken retrieval.</p>"),
             table(["variant", *keys], rows)]
    parts += [note(text) for text in reuse_notes(run)]  # borrowed sides (issue 31)
    for name in names:
        info = run.summary_variant(name)
        differ = info.settings_differ if info is not None else None
        if differ:
            parts.append(note(f"{name}: encoding settings differ from {run.reference} in "
                              + ", ".join(sorted(differ))))
    return Markup("").join(parts)


# -- provenance ------------------------------------------------------------------------

@section("provenance", "Provenance", kind=KIND, order=70)
def provenance_section(run: RunView, page: Page) -> Markup:
    m = run.manifest
    model, environment = m.model_record, m.environment_record
    facts = [
        ("evalq version", m.evalq_version),
        ("git revision", m.git_revision),
        ("status", m.status),
        ("started", m.started),
        ("finished", m.finished or m.stopped),
        ("recipe file", m.recipe_file),
        ("options", json.dumps(m.options, sort_keys=True)),
        ("model", model.path),
        ("model fingerprint", model.fingerprint),
        ("platform", environment.platform),
        ("CPUs", environment.cpu_count),
        ("results folder", str(run.root)),
    ]
    parts = [table(["", ""], [[k, "—" if v is None else str(v)] for k, v in facts])]
    ds_rows = []
    for name, d in m.datasets.items():
        source = d.source_record
        ds_rows.append([name, d.fingerprint or "—",
                        "—" if d.queries is None else str(d.queries),
                        "—" if d.documents is None else str(d.documents),
                        str(source.source or source.path or "—")])
    parts += [Markup("<h3>Datasets</h3>"),
              table(["dataset", "fingerprint", "queries", "documents", "source"], ds_rows)]
    v_rows = []
    for name in run.variants:
        backend = run.backend(name)
        v_rows.append([name, backend.backend or "—",
                       backend.model_fingerprint or "—", backend.fingerprint or "—",
                       "yes" if run.ran(name) else "no"])
    parts += [Markup("<h3>Variants</h3>"),
              table(["variant", "backend", "model fingerprint", "backend fingerprint", "ran"],
                    v_rows)]
    versions = m.versions
    parts += [Markup("<h3>Package versions</h3>"),
              table(["package", "version"], [[k, str(v)] for k, v in versions.items()]),
              Markup("<details><summary>recipe as resolved</summary><pre>{}</pre></details>"
                     ).format(json.dumps(m.recipe, indent=2))]
    return Markup("").join(parts)
