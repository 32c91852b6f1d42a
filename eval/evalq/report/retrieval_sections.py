"""The quality sections of a retrieval run (embedding variants scored against qrels and
against the reference): verdict, metric table and per-query view, and the helpers every
retrieval section shares (kind, colours, status cells, dataset headings). The cost,
drift, settings and provenance sections are in :mod:`evalq.report.retrieval_cost_sections`.
Each renders from stored results only.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from markupsafe import Markup

from evalq.report.html import Page, fmt, fmt_mib, fmt_signed, note, plot_text, table
from evalq.report.runview import RunView, finite
from evalq.report.sections import section
from evalq.report.verdict import COST_LABELS, candidate_verdicts, costs, recommend
from evalq.results.schema import MeanEntry, MetricEntry, TextsPart

KIND = "retrieval"
PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3",
           "#8c8c8c", "#ccb974", "#64b5cd")
STATUS_TEXT = {"ship": "may ship", "fail": "failed", "inconclusive": "inconclusive",
               "not run": "did not run", "no verdict": "no verdict"}
MOST_HURT = 5


def plotly_go() -> Any:
    import plotly.graph_objects as go

    return go


def variant_colour(run: RunView, variant: str) -> str:
    return PALETTE[run.variants.index(variant) % len(PALETTE)]


def status_cell(status: str) -> tuple[str, str]:
    css = {"ship": "pass", "fail": "fail", "inconclusive": "inconclusive"}.get(status, "muted")
    return STATUS_TEXT.get(status, status), css


def ds_heading(run: RunView, ds: str) -> Markup:
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
                     status_cell(v.status), why])
    parts.append(table(["candidate", "verdict", "why"], rows))
    for w in run.summary.warnings if run.summary is not None else []:
        parts.append(note(f"warning: {w}"))
    return Markup("").join(parts)


# -- metric table ------------------------------------------------------------------------

def _ci(entry: MeanEntry | None) -> str:
    if entry is None:
        return "—"
    return (f"{fmt(finite(entry.value))} "
            f"[{fmt(finite(entry.ci_low), 3)}, {fmt(finite(entry.ci_high), 3)}]")


def _delta(entry: MetricEntry | None) -> tuple[str, str]:
    vs = entry.vs_reference if entry is not None else None
    if vs is None:
        return "—", "muted"
    low, high = finite(vs.ci_low), finite(vs.ci_high)
    text = (f"{fmt_signed(finite(vs.delta))} "
            f"[{fmt_signed(low, 3)}, {fmt_signed(high, 3)}]")
    css = "fail" if high is not None and high < 0 else ""
    return text, css


@section("metrics", "Variants × metrics", kind=KIND, order=20)
def metrics_section(run: RunView, page: Page) -> Markup:
    if run.summary is None:
        return note("no summary.json: the metric table needs the run's aggregates "
                    "(rerun 'evalq run' to finish the folder)")
    metrics, ref_metrics = run.recipe.metrics, run.recipe.reference_metrics
    conf = run.confidence
    parts = [Markup("<p class=\"muted\">value [{}% CI]; Δ = candidate − reference "
                    "(paired, per query) [{}% CI]; red Δ: the whole interval is below 0. "
                    "Peak RSS is the evaluating process's peak so far (it includes earlier "
                    "variants).</p>").format(f"{conf * 100:g}", f"{conf * 100:g}")]
    statuses = {v.name: v.status for v in candidate_verdicts(run)}
    for ds in run.datasets:
        ds_entry = run.summary.datasets.get(ds)
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
            row.append(("reference", "muted") if is_ref else status_cell(
                statuses.get(name, "no verdict")))
            for m in metrics:
                e = entry.metrics.get(m)
                row += [_ci(e), ("—", "muted") if is_ref else _delta(e)]
            for m in ref_metrics:
                row.append("—" if is_ref else _ci((entry.reference_metrics or {}).get(m)))
            c = costs(run, name)
            row += [fmt_mib(c.weight_bytes), c.index_text(),
                    c.throughput_text(),
                    "—" if c.peak_rss_mb is None else f"{c.peak_rss_mb:.0f} MiB"]
            rows.append(row)
        numeric = list(range(2, len(headers)))
        parts += [ds_heading(run, ds),
                  Markup("<p class=\"muted\">{} queries, {} documents</p>").format(
                      "?" if ds_entry is None else ds_entry.queries,
                      "?" if ds_entry is None or ds_entry.documents is None
                      else ds_entry.documents),
                  table(headers, rows, numeric=numeric)]
        missing = [v for v in run.variants if run.ran(v) and run.entry(ds, v) is None]
        if missing:
            parts.append(note(f"no summary entry for {', '.join(missing)}"))
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
              texts: TextsPart | None) -> Markup:
    top = (run.top(ds, variant) or {}).get(qid)
    if top is None:
        return note(f"no stored run for {variant}")
    judged = texts.judgments.get(qid, {}) if texts is not None else {}
    docs = texts.documents if texts is not None else {}
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
    queries = texts.queries if texts is not None else {}
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
    go = plotly_go()
    metrics = list(run.recipe.metrics)
    headline = run.headline_metric()
    parts: list[Markup] = []
    for ds in run.datasets:
        parts.append(ds_heading(run, ds))
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
                    marker={"color": variant_colour(run, name), "size": 6},
                    hovertemplate="query %{text}<br>reference %{x:.4f}<br>candidate "
                    "%{y:.4f}<extra>" + plot_text(name) + "</extra>"))
                box.add_trace(go.Box(
                    y=cand - ref, name=plot_text(name), boxpoints="all", jitter=0.4,
                    pointpos=0, marker={"color": variant_colour(run, name), "size": 3},
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
