"""`evalq report RESULTS... -o report.html`: one results folder gives the run's report,
several of the same recipe give its history page.

The page is assembled from the registered sections (``report.sections``) of the kinds
the folder holds; each section renders from the stored results only.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from markupsafe import Markup

from evalq.core import atomicio
from evalq.core.errors import InputError
from evalq.report.contents import sections_for
from evalq.report.history import render_history
from evalq.report.html import Page
from evalq.report.runview import RunView, host_text
from evalq.report.verdict import gates_word


def _header(run: RunView) -> Markup:
    summary = run.summary
    if summary is None:
        verdict, css = f"run {run.manifest.status or 'unfinished'}", "warn"
    elif gates_word(summary) != "PASSED" and summary.passed:
        verdict, css = "no candidate gated", "warn"
    elif summary.passed:
        verdict, css = "every gate PASSED", "pass"
    else:
        verdict, css = "gates FAILED", "fail"
    datasets = ", ".join(
        f"{ds} ({'?' if d.queries is None else d.queries} queries, "
        f"{'?' if d.documents is None else d.documents} documents)"
        for ds, d in run.manifest.datasets.items())
    return Markup(
        "<header><h1>evalq · {name}</h1><p>{desc}</p><p><span class=\"{css}\">{verdict}"
        "</span> · reference {ref} · {datasets}</p><p>started {started} · git {rev} · "
        "evalq {version}</p><p>{host}</p></header>"
    ).format(name=run.name, desc=run.recipe.description or "", css=css,
             host=host_text(run.host),
             verdict=verdict, ref=run.reference, datasets=datasets, started=run.started,
             rev=run.git_revision, version=run.manifest.evalq_version or "?")


def render_run(run: RunView) -> str:
    page = Page(f"evalq · {run.name}")
    sections = sections_for(run)
    body = Markup("").join(
        Markup('<section id="{}"><h2>{}</h2>{}</section>').format(
            s.id, s.title, s.render(run, page))
        for s in sections)
    return page.render(_header(run), [(s.id, s.title) for s in sections], body)


def write_report(results: Sequence[str | Path], output: str | Path) -> Path:
    """Write the report of one folder, or the history of several; returns the path."""
    if not results:
        raise InputError(message="no results folder given", field="RESULTS",
                         fix="evalq report results/quickstart -o report.html")
    out = Path(output)
    atomicio.check_output_location(out, folder=False, field="-o", what="the report")
    runs = [RunView.load(r) for r in results]
    text = render_run(runs[0]) if len(runs) == 1 else render_history(runs)
    try:  # a disk that fills while writing
        atomicio.write_text(out, text)
    except OSError as exc:
        raise InputError(message=f"cannot write the report ({exc.strerror})", file=out,
                         field="-o", fix="choose a writable path") from None
    return out
