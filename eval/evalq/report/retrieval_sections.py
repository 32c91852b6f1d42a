"""The sections of a retrieval run (embedding variants scored against qrels and against
the reference): verdict, metric table, quality against cost, per-query view, embedding
drift, settings and provenance. Each renders from stored results only.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from markupsafe import Markup

from evalq.report.html import Page, fmt, fmt_mib, fmt_signed, note, plot_text, table
from evalq.report.runview import RunView, finite
from evalq.report.sections import section
from evalq.report.verdict import COST_LABELS, candidate_verdicts, costs, recommend

KIND = "retrieval"
PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3",
           "#8c8c8c", "#ccb974", "#64b5cd")
STATUS_TEXT = {"ship": "may ship", "fail": "failed", "inconclusive": "inconclusive",
               "not run": "did not run", "no verdict": "no verdict"}
MOST_HURT = 5


def _go() -> Any:
    import plotly.graph_objects as go

    return go


def _colour(run: RunView, variant: str) -> str:
    return PALETTE[run.variants.index(variant) % len(PALETTE)]


def _status_cell(status: str) -> tuple[str, str]:
    css = {"ship": "pass", "fail": "fail", "inconclusive": "inconclusive"}.get(status, "muted")
    return STATUS_TEXT.get(status, status), css


def _ds_heading(run: RunView, ds: str) -> Markup:
    if len(run.datasets) < 2:
        return Markup("")
    return Markup("<h3>dataset {}</h3>").format(ds)


# -- verdict ---------------------------------------------------------------------------

@section("verdict", "Verdict", kind=KIND, order=10)
def verdict_section(run: RunView, page: Page) -> Markup:
    parts = [note(n) for n in run.notes]
    verdicts = candidate_verdicts(run)
    rec = recommend(run, verdicts)
    css = "ship" if rec.variant else "none"
    parts.append(Markup('<div class="banner {}"><strong>Recommendation:</strong> {}'
                        '<br><span class="muted">cost measure from the recipe '
                        '(report.cost): {}</span></div>').format(
        css, rec.text, COST_LABELS.get(rec.cost_key, rec.cost_key)))
    rows = []
    for v in verdicts:
        if v.status == "ship":
            why: Any = "every gate passed"
        elif v.status == "not run":
            why = "named in the recipe, absent from the results (run with --only, or it failed)"
        elif v.status == "no verdict":
            why = "no gate verdict stored"
        elif v.status == "ungated":
            why = "no gate applies to it: measured, not certified (never recommended)"
        else:
            items = Markup("").join(
                Markup("<li><span class=\"{}\">{}</span> {}{}: {}</li>").format(
                    f.verdict, f.verdict, f.gate,
                    f" ({f.dataset})" if len(run.datasets) > 1 else "", f.reason)
                for f in v.failures)
            why = Markup("<ul>{}</ul>").format(items)
            if v.status == "inconclusive" and v.queries_needed:
                why = Markup("{}<p>about {} queries would decide it</p>").format(
                    why, v.queries_needed)
        rows.append([Markup("<span class=\"variant\">{}</span>").format(v.name),
                     _status_cell(v.status), why])
    parts.append(table(["candidate", "verdict", "why"], rows))
    for w in (run.summary or {}).get("warnings", []):
        parts.append(note(f"warning: {w}"))
    return Markup("").join(parts)


# -- metric table ------------------------------------------------------------------------

def _ci(entry: dict[str, Any] | None) -> str:
    if not entry:
        return "—"
    return (f"{fmt(finite(entry.get('value')))} "
            f"[{fmt(finite(entry.get('ci_low')), 3)}, {fmt(finite(entry.get('ci_high')), 3)}]")


def _delta(entry: dict[str, Any] | None) -> tuple[str, str]:
    vs = (entry or {}).get("vs_reference")
    if not vs:
        return "—", "muted"
    low, high = finite(vs.get("ci_low")), finite(vs.get("ci_high"))
    text = (f"{fmt_signed(finite(vs.get('delta')))} "
            f"[{fmt_signed(low, 3)}, {fmt_signed(high, 3)}]")
    css = "fail" if high is not None and high < 0 else ""
    return text, css


@section("metrics", "Variants × metrics", kind=KIND, order=20)
def metrics_section(run: RunView, page: Page) -> Markup:
    if run.summary is None:
        return note("no summary.json: the metric table needs the run's aggregates "
                    "(rerun 'evalq run' to finish the folder)")
    metrics = list(run.recipe.get("metrics", []))
    ref_metrics = list(run.recipe.get("reference_metrics", []))
    conf = (run.recipe.get("stats") or {}).get("confidence", 0.95)
    parts = [Markup("<p class=\"muted\">value [{}% CI]; Δ = candidate − reference "
                    "(paired, per query) [{}% CI]; red Δ: the whole interval is below 0. "
                    "Peak RSS is the evaluating process's peak so far (it includes earlier "
                    "variants).</p>").format(f"{conf * 100:g}", f"{conf * 100:g}")]
    statuses = {v.name: v.status for v in candidate_verdicts(run)}
    for ds in run.datasets:
        ds_entry = (run.summary.get("datasets") or {}).get(ds, {})
        headers = ["variant", "gates"]
        for m in metrics:
            headers += [m, f"Δ {m}"]
        headers += [*ref_metrics, "weights", "index", "docs/s", "peak RSS"]
        rows = []
        for name in run.variants:
            entry = run.entry(ds, name)
            if entry is None:
                continue
            is_ref = name == run.reference
            row: list[Any] = [Markup("<span class=\"variant\">{}</span>{}").format(
                name, " (reference)" if is_ref else "")]
            row.append(("reference", "muted") if is_ref else _status_cell(
                statuses.get(name, "no verdict")))
            for m in metrics:
                e = (entry.get("metrics") or {}).get(m)
                row += [_ci(e), ("—", "muted") if is_ref else _delta(e)]
            for m in ref_metrics:
                row.append("—" if is_ref else _ci((entry.get("reference_metrics") or {}).get(m)))
            c = costs(run, name)
            row += [fmt_mib(c.weight_bytes), fmt_mib(c.index_bytes),
                    "cached" if c.throughput is None else f"{c.throughput:.1f}",
                    "—" if c.peak_rss_mb is None else f"{c.peak_rss_mb:.0f} MiB"]
            rows.append(row)
        numeric = list(range(2, len(headers)))
        parts += [_ds_heading(run, ds),
                  Markup("<p class=\"muted\">{} queries, {} documents</p>").format(
                      ds_entry.get("queries", "?"), ds_entry.get("documents", "?")),
                  table(headers, rows, numeric=numeric)]
        missing = [v for v in run.variants if run.ran(v) and run.entry(ds, v) is None]
        if missing:
            parts.append(note(f"no summary entry for {', '.join(missing)}"))
    return Markup("").join(parts)


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

    go = _go()
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
                vs = ((entry.get("metrics") or {}).get(metric) or {}).get("vs_reference")
                delta = 0.0 if name == run.reference else finite((vs or {}).get("delta"))
                if delta is None:
                    continue
                points.append((name, value * scale, delta, vs or {}))
            if not points:
                missing_axes.append(key)
                continue
            front = pareto_front([(n, c, q) for n, c, q, _ in points], higher)
            for name, cost, delta, vs in points:
                status = "reference" if name == run.reference else STATUS_TEXT.get(
                    statuses.get(name, ""), "")
                low, high = finite(vs.get("ci_low")), finite(vs.get("ci_high"))
                error = None
                if low is not None and high is not None:
                    error = {"type": "data", "symmetric": False, "array": [high - delta],
                             "arrayminus": [delta - low], "thickness": 1}
                fig.add_trace(go.Scatter(
                    x=[cost], y=[delta], mode="markers", name=plot_text(name),
                    legendgroup=plot_text(name), showlegend=col == 1, error_y=error,
                    marker={"size": 14 if name in front else 9, "color": _colour(run, name),
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
        parts += [_ds_heading(run, ds), page.figure(fig, height=420)]
        if missing_axes:
            parts.append(note("not plotted (figure not stored, or every chunk was cached so "
                              f"no throughput was timed): {', '.join(missing_axes)}"))
    return Markup("").join(parts)


# -- per-query view ----------------------------------------------------------------------

def _paired(run: RunView, ds: str, variant: str, metric: str) -> tuple[
        list[str], np.ndarray, np.ndarray] | None:
    """Stored per-query values of the reference and a candidate, paired by query id."""
    ref = run.per_query(ds, run.reference)
    cand = run.per_query(ds, variant)
    if ref is None or cand is None or metric not in ref.values or metric not in cand.values:
        return None
    row = {q: i for i, q in enumerate(ref.query_ids)}
    ids = [q for q in cand.query_ids if q in row]
    ci = {q: i for i, q in enumerate(cand.query_ids)}
    r = np.array([ref.values[metric][row[q]] for q in ids], dtype=np.float64)
    c = np.array([cand.values[metric][ci[q]] for q in ids], dtype=np.float64)
    return ids, r, c


def _top_list(run: RunView, ds: str, variant: str, qid: str, other: set[str],
              texts: dict[str, Any] | None) -> Markup:
    top = (run.top(ds, variant) or {}).get(qid)
    if top is None:
        return note(f"no stored run for {variant}")
    judged = ((texts or {}).get("judgments") or {}).get(qid, {})
    docs = (texts or {}).get("documents") or {}
    rows = []
    for rank, (doc, score) in enumerate(top, start=1):
        rel = judged.get(doc, 0)
        mark = Markup('<span class="rel" title="judged relevant">rel {}</span>').format(rel) \
            if rel and rel > 0 else ""
        rows.append([str(rank), (Markup("<code>{}</code> {}").format(doc, mark),
                                 "" if doc in other else "only"),
                     f"{score:.4f}", (docs.get(doc, ""), "snippet")])
    return table(["#", "document", "score", "first words"], rows, numeric=[0, 2])


def _most_hurt(run: RunView, ds: str, variant: str, metric: str) -> Markup:
    pair = _paired(run, ds, variant, metric)
    if pair is None:
        return note(f"no stored per-query {metric} for {variant} or the reference")
    ids, ref, cand = pair
    delta = cand - ref
    order = sorted(range(len(ids)), key=lambda i: (delta[i], ids[i]))
    hurt = [i for i in order if delta[i] < 0][:MOST_HURT]
    if not hurt:
        return Markup("<p>no query scores lower {} than the reference.</p>").format(
            f"on {metric}")
    texts = run.texts(ds)
    parts = []
    if texts is None:
        parts.append(note("no texts/ in this folder (an older run, or report.snippet_words: "
                          "0): ids only"))
    queries = (texts or {}).get("queries") or {}
    for i in hurt:
        qid = ids[i]
        ref_top = {d for d, _ in (run.top(ds, run.reference) or {}).get(qid, [])}
        cand_top = {d for d, _ in (run.top(ds, variant) or {}).get(qid, [])}
        parts.append(Markup(
            '<div class="hurt"><h4>query <code>{}</code>: {} {} → {} (Δ {})</h4>'
            '<p class="query-text">{}</p><div class="side"><div><strong>{}</strong> '
            '(reference) top 10{}</div><div><strong>{}</strong> top 10{}</div></div></div>'
        ).format(qid, metric, fmt(float(ref[i])), fmt(float(cand[i])),
                 fmt_signed(float(delta[i])), queries.get(qid, ""), run.reference,
                 _top_list(run, ds, run.reference, qid, cand_top, texts), variant,
                 _top_list(run, ds, variant, qid, ref_top, texts)))
    return Markup(
        "<p class=\"muted\">Shaded rows: the document is not in the other variant's top 10. "
        "<span class=\"rel\">rel</span>: judged relevant.</p>{}").format(
        Markup("").join(parts))


@section("per-query", "Per-query view", kind=KIND, order=40)
def per_query_section(run: RunView, page: Page) -> Markup:
    go = _go()
    metrics = list(run.recipe.get("metrics", []))
    headline = run.headline_metric()
    parts: list[Markup] = []
    for ds in run.datasets:
        parts.append(_ds_heading(run, ds))
        if run.per_query(ds, run.reference) is None:
            parts.append(note(f"no per_query/{ds}/{run.reference}.jsonl: the per-query view "
                              "needs the reference's stored values"))
            continue
        candidates = [v for v in run.candidates if run.per_query(ds, v) is not None]
        # Shown first (visible scatter, open list): the first candidate that did not pass.
        statuses = {v.name: v.status for v in candidate_verdicts(run)}
        focus = next((v for v in candidates if statuses.get(v) in ("fail", "inconclusive")),
                     candidates[0] if candidates else None)
        absent = [v for v in run.candidates if v not in candidates]
        if absent:
            parts.append(note(f"no stored per-query values for {', '.join(absent)}"))
        for metric in metrics:
            scatter = go.Figure()
            box = go.Figure()
            for name in candidates:
                pair = _paired(run, ds, name, metric)
                if pair is None:
                    continue
                ids, ref, cand = pair
                visible = True if name == focus else "legendonly"
                scatter.add_trace(go.Scatter(
                    x=ref, y=cand, mode="markers", name=plot_text(name), visible=visible,
                    text=[plot_text(q) for q in ids], opacity=0.6,
                    marker={"color": _colour(run, name), "size": 6},
                    hovertemplate="query %{text}<br>reference %{x:.4f}<br>candidate "
                    "%{y:.4f}<extra>" + plot_text(name) + "</extra>"))
                box.add_trace(go.Box(
                    y=cand - ref, name=plot_text(name), boxpoints="all", jitter=0.4,
                    pointpos=0, marker={"color": _colour(run, name), "size": 3},
                    text=[plot_text(q) for q in ids],
                    hovertemplate="query %{text}<br>Δ %{y:.4f}<extra></extra>"))
            scatter.add_trace(go.Scatter(x=[0, 1], y=[0, 1], mode="lines", name="y = x",
                                         line={"dash": "dot", "color": "#888"},
                                         hoverinfo="skip"))
            scatter.update_layout(title=plot_text(f"{metric} per query: reference vs candidate"
                                                  " (click the legend to switch)"),
                                  xaxis_title=plot_text(f"{run.reference} (reference)"),
                                  yaxis_title="candidate")
            box.update_layout(title=plot_text(f"per-query Δ {metric} (candidate − reference)"),
                              showlegend=False)
            parts.append(Markup('<div class="side"><div>{}</div><div>{}</div></div>').format(
                page.figure(scatter), page.figure(box)))
        if headline is None:
            continue
        parts.append(Markup("<h3>Most-hurt queries by {}</h3>").format(headline))
        for name in candidates:
            parts.append(Markup("<details{}><summary>{}</summary>{}</details>").format(
                Markup(" open") if name == focus else "", name,
                _most_hurt(run, ds, name, headline)))
    return Markup("").join(parts)


# -- embedding drift -------------------------------------------------------------------

@section("cosines", "Embedding drift: cosine(reference, candidate)", kind=KIND, order=50)
def cosine_section(run: RunView, page: Page) -> Markup:
    go = _go()
    parts: list[Markup] = [Markup(
        "<p class=\"muted\">Per text: the cosine between the reference's and the candidate's "
        "embedding of the same query or document (documents as the index stores them).</p>")]
    for ds in run.datasets:
        parts.append(_ds_heading(run, ds))
        fig = go.Figure()
        missing = []
        rows = []
        legend_shown: set[str] = set()
        for name in run.candidates:
            per_text = run.per_text(ds, name)
            vectors = (run.entry(ds, name) or {}).get("vectors") or {}
            for role in ("query", "document"):
                s = vectors.get(role) or {}
                if s:
                    rows.append([name, role, fmt(finite(s.get("mean")), 6),
                                 fmt(finite(s.get("p1")), 6), fmt(finite(s.get("min")), 6),
                                 str(s.get("nan", 0)), str(s.get("inf", 0))])
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


def _variant_recipe(run: RunView, name: str) -> dict[str, Any]:
    for v in [run.recipe.get("reference") or {}, *run.recipe.get("candidates", [])]:
        if v.get("name") == name:
            return v
    return {}


def _settings_row(run: RunView, name: str) -> dict[str, str]:
    info = run.manifest_variant(name)
    backend = info.get("backend") or {}
    settings = info.get("settings") or backend.get("settings") or {}
    quant = backend.get("quantization") if isinstance(backend.get("quantization"), dict) else {}
    recipe_v = _variant_recipe(run, name)
    vectors = recipe_v.get("vectors") or {}
    row = {k: json.dumps(settings.get(k)) if k in settings else "—" for k in _SETTING_KEYS}
    row["backend"] = str(backend.get("backend") or recipe_v.get("backend") or "—")
    row["dtype"] = str(backend.get("dtype") or recipe_v.get("dtype") or "—")
    q = quant or {}
    method = q.get("method") or "—"
    bits = f" {q.get('bits')}-bit" if q.get("bits") else ""
    params = q.get("params") or {}
    row["quantization"] = f"{method}{bits}" + (f" {json.dumps(params, sort_keys=True)}"
                                               if params else "")
    quantize = vectors.get("quantize", "none")
    row["vectors"] = quantize + (f", rescore ×{vectors['rescore']}"
                                 if vectors.get("rescore") else "")
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
    for name in names:
        differ = run.summary_variant(name).get("settings_differ")
        if differ:
            parts.append(note(f"{name}: encoding settings differ from {run.reference} in "
                              + ", ".join(sorted(differ))))
    return Markup("").join(parts)


# -- provenance ------------------------------------------------------------------------

@section("provenance", "Provenance", kind=KIND, order=70)
def provenance_section(run: RunView, page: Page) -> Markup:
    m = run.manifest
    model = m.get("model") or {}
    facts = [
        ("evalq version", m.get("evalq_version")),
        ("git revision", m.get("git_revision")),
        ("status", m.get("status")),
        ("started", m.get("started")),
        ("finished", m.get("finished") or m.get("stopped")),
        ("recipe file", m.get("recipe_file")),
        ("options", json.dumps(m.get("options"), sort_keys=True)),
        ("model", model.get("path")),
        ("model fingerprint", model.get("fingerprint")),
        ("platform", (m.get("environment") or {}).get("platform")),
        ("CPUs", (m.get("environment") or {}).get("cpu_count")),
        ("results folder", str(run.root)),
    ]
    parts = [table(["", ""], [[k, "—" if v is None else str(v)] for k, v in facts])]
    ds_rows = []
    for name, d in (m.get("datasets") or {}).items():
        source = d.get("source") or {}
        ds_rows.append([name, d.get("fingerprint") or "—", str(d.get("queries", "—")),
                        str(d.get("documents", "—")),
                        str(source.get("source") or source.get("path") or "—")])
    parts += [Markup("<h3>Datasets</h3>"),
              table(["dataset", "fingerprint", "queries", "documents", "source"], ds_rows)]
    v_rows = []
    for name in run.variants:
        backend = run.manifest_variant(name).get("backend") or {}
        v_rows.append([name, backend.get("backend") or "—",
                       backend.get("model_fingerprint") or "—", backend.get("fingerprint") or "—",
                       "yes" if run.ran(name) else "no"])
    parts += [Markup("<h3>Variants</h3>"),
              table(["variant", "backend", "model fingerprint", "backend fingerprint", "ran"],
                    v_rows)]
    versions = m.get("versions") or {}
    parts += [Markup("<h3>Package versions</h3>"),
              table(["package", "version"], [[k, str(v)] for k, v in versions.items()]),
              Markup("<details><summary>recipe as resolved</summary><pre>{}</pre></details>"
                     ).format(json.dumps(run.recipe, indent=2))]
    return Markup("").join(parts)
