"""The HTML report's sections for rerank pipelines (result kind ``pipeline``): each
combination's quality against the reference pipeline with its gate verdict, the
attribution of a change to the retriever, the reranker and their interaction, the
reranker's score fidelity, and each stage's cost. Rendered from the stored summary
(``report.pipelines``), the same rows the console, markdown and JUnit outputs use.
"""

from __future__ import annotations

from markupsafe import Markup

from evalq.report.html import Page, fmt, fmt_mib, note, table
from evalq.report.pipelines import ATTRIBUTION_PARTS, pipeline_views, verdict_text
from evalq.report.runview import RunView
from evalq.report.sections import KIND_DETECTORS, section

KIND = "pipeline"
KIND_DETECTORS[KIND] = lambda run: bool(run.summary is not None and run.summary.pipelines)

_CSS = {"pass": "pass", "fail": "fail", "inconclusive": "inconclusive", "ungated": "muted",
        "reference": "muted"}


@section("pipelines", "Rerank pipelines", kind=KIND, order=80)
def pipelines_section(run: RunView, page: Page) -> Markup:
    parts = []
    for view in pipeline_views(run.summary):
        verdict = ("every gate passed" if view.passed else "gates failed"
                   if view.passed is False else "no verdict")
        parts.append(Markup('<h3 id="pipeline-{}">pipeline {}: <span class="{}">{}</span>'
                            "</h3>").format(view.name, view.name,
                                            "pass" if view.passed else "fail", verdict))
        if view.note:
            parts.append(note(view.note))
        rows = []
        for c in view.combinations:
            cells = [c.deltas[m].text(signed=True) if m in c.deltas
                     else c.metrics[m].text() if m in c.metrics else "—" for m in view.metrics]
            status = verdict_text(c)
            reasons = Markup("").join(
                Markup("<li><span class=\"{}\">{}</span> {}: {}</li>").format(
                    ch.verdict, ch.verdict, ch.gate, ch.reason) for ch in c.checks)
            rows.append([c.dataset, c.name, c.kind, c.recall.text(), *cells,
                         (status, _CSS.get(status, "")),
                         Markup("<ul>{}</ul>").format(reasons) if c.checks else ""])
        parts.append(table(["dataset", "combination", "kind", "first-stage recall",
                            *[f"{m}: value or Δ vs reference [CI]" for m in view.metrics],
                            "verdict", "gates"], rows,
                           numeric=range(3, 4 + len(view.metrics))))
        attribution = [[c.dataset, c.name, m, *[parts_[p].text(signed=True)
                                                for p in ATTRIBUTION_PARTS]]
                       for c in view.combinations for m, parts_ in c.attribution.items()]
        if attribution:
            parts.append(Markup("<h3>{}: attribution of the change</h3>").format(view.name))
            parts.append(table(["dataset", "combination", "metric", "retriever only",
                                "reranker only", "interaction", "total"], attribution,
                               numeric=range(3, 7)))
    return Markup("").join(parts)


@section("pipeline-fidelity", "Reranker score fidelity", kind=KIND, order=81)
def fidelity_section(run: RunView, page: Page) -> Markup:
    parts = []
    for view in pipeline_views(run.summary):
        if not view.fidelity:
            continue
        measures = list(dict.fromkeys(m for f in view.fidelity for m in f.measures))
        rows = [[f.dataset, f.reranker, str(f.depth), *[
            f.measures[m].text() if m in f.measures else "—" for m in measures],
            fmt(f.mean_abs_delta), fmt(f.p99_abs_delta)] for f in view.fidelity]
        parts.append(Markup("<h3>{}</h3>").format(view.name))
        parts.append(table(["dataset", "reranker", "depth", *measures, "mean |Δ score|",
                            "p99 |Δ score|"], rows, numeric=range(2, 5 + len(measures))))
    return Markup("").join(parts) or note("no quantized reranker: no fidelity measured")


@section("pipeline-cost", "Pipeline cost per stage", kind=KIND, order=82)
def cost_section(run: RunView, page: Page) -> Markup:
    parts = []
    for view in pipeline_views(run.summary):
        rows = [[s.dataset, s.stage, s.name, "—" if s.depth is None else str(s.depth),
                 fmt(s.seconds_per_query), fmt(s.forward_passes_per_query, 0),
                 fmt(s.pairs_per_s, 1), fmt_mib(s.weight_bytes), fmt(s.multiplier, 1)]
                for s in view.costs]
        parts.append(Markup("<h3>{}</h3>").format(view.name))
        parts.append(table(["dataset", "stage", "name", "depth", "seconds / query",
                            "forward passes / query", "pairs / s", "weights",
                            "× first stage"], rows, numeric=range(3, 9)))
    return Markup("").join(parts)
