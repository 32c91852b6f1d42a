"""One self-contained HTML document: CSS, plotly.js and every figure inlined.

Escaping is by construction: fragments are ``markupsafe.Markup`` and ``Markup.format``
escapes every argument that is not itself ``Markup``, so a corpus text, query text or
variant name can only ever reach the page as text. Figures travel as one JSON block
(``type="application/json"``, never executed) in which ``<``, ``>`` and ``&`` are written
as ``\\u003c``-style escapes, so no string in them can close the block. Strings inside
plotly figures are HTML-escaped too (:func:`plot_text`): plotly.js reads a subset of HTML
in labels and decodes entities, so an escaped name is drawn as the literal text.

The page carries a Content-Security-Policy that allows exactly its own two inline scripts
(by SHA-256) and no network at all: even a text that slipped through escaping could not
run a handler or load anything, and the browser test would see the refusal as a console
error.
"""

from __future__ import annotations

import base64
import hashlib
import html as _html
from collections.abc import Iterable, Sequence
from typing import Any

from markupsafe import Markup, escape

from evalq.core.errors import MissingExtraError

_BOOT = """(function () {
  var figures = JSON.parse(document.getElementById("evalq-figures").textContent);
  var nodes = document.querySelectorAll("div.plot[data-fig]");
  for (var i = 0; i < nodes.length; i++) {
    var f = figures[Number(nodes[i].getAttribute("data-fig"))];
    Plotly.newPlot(nodes[i], f.data, f.layout || {}, {displaylogo: false, responsive: true});
  }
  document.documentElement.setAttribute("data-rendered", String(nodes.length));
})();"""

_CSS = """
:root { --ok: #1a7f37; --bad: #cf222e; --warn: #9a6700; --muted: #57606a; --line: #d0d7de;
        --bg: #f6f8fa; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0;
       color: #1f2328; background: #fff; }
header { padding: 18px 28px 10px; border-bottom: 1px solid var(--line); background: var(--bg); }
header h1 { margin: 0 0 4px; font-size: 22px; }
header p { margin: 2px 0; color: var(--muted); }
nav { padding: 6px 28px; border-bottom: 1px solid var(--line); font-size: 13px; }
nav a { margin-right: 14px; color: #0969da; text-decoration: none; }
main { padding: 8px 28px 40px; max-width: 1400px; }
section { margin: 22px 0 30px; }
h2 { font-size: 18px; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
h3 { font-size: 15px; margin: 18px 0 6px; }
table { border-collapse: collapse; margin: 6px 0 12px; font-size: 13px; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: left;
         vertical-align: top; }
th { background: var(--bg); font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.pass, .ship { color: var(--ok); font-weight: 600; }
.fail { color: var(--bad); font-weight: 600; }
.inconclusive, .warn { color: var(--warn); font-weight: 600; }
.muted { color: var(--muted); }
.note { border-left: 4px solid var(--warn); background: #fff8c5; padding: 6px 10px;
        margin: 8px 0; }
.banner { border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px;
          margin: 10px 0; }
.banner.ship { border-color: var(--ok); background: #dafbe1; color: #1f2328; }
.banner.none { border-color: var(--bad); background: #ffebe9; color: #1f2328; }
.differs { background: #fff8c5; }
.scroll { overflow-x: auto; max-width: 100%; }
.plot { width: 100%; min-height: 360px; }
.side { display: flex; gap: 14px; flex-wrap: wrap; }
.side > div { flex: 1 1 480px; min-width: 0; }
.snippet { color: var(--muted); }
.only { background: #ffebe9; }
.rel { font-weight: 700; color: var(--ok); }
details { margin: 6px 0; }
summary { cursor: pointer; }
code, pre { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; }
pre { background: var(--bg); padding: 8px; overflow: auto; max-height: 420px; }
"""


def plot_text(value: Any) -> str:
    """A string for plotly (names, labels, hover text): HTML-escaped, because plotly.js
    interprets a subset of HTML tags in text and decodes entities when drawing."""
    return _html.escape(str(value), quote=True)


def _script_json(text: str) -> str:
    """JSON that is safe inside a ``<script>`` block: no ``<``, ``>`` or ``&`` left."""
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _sha256(script: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()
                                         ).decode("ascii") + "'"


def plotly_js() -> str:
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise MissingExtraError("plotly", "cpu", "the HTML report") from None
    return str(get_plotlyjs())


class Page:
    """Collects plotly figures while sections render, then writes the document."""

    def __init__(self, title: str) -> None:
        self.title = title
        self._figures: list[str] = []

    def figure(self, fig: Any, height: int = 380) -> Markup:
        """Place a ``plotly.graph_objects.Figure``; returns its placeholder ``<div>``."""
        fig.update_layout(height=height, margin={"l": 60, "r": 20, "t": 40, "b": 50},
                          template="plotly_white")
        self._figures.append(fig.to_json())
        index = len(self._figures) - 1
        return Markup('<div class="plot" id="fig-{0}" data-fig="{0}"></div>').format(index)

    @property
    def figure_count(self) -> int:
        return len(self._figures)

    def render(self, header: Markup, nav: Sequence[tuple[str, str]], body: Markup) -> str:
        js = plotly_js()
        csp = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
               f"script-src {_sha256(js)} {_sha256(_BOOT)}; base-uri 'none'; form-action 'none'")
        links = Markup("").join(Markup('<a href="#{}">{}</a>').format(i, t) for i, t in nav)
        figures = Markup(_script_json("[" + ",".join(self._figures) + "]"))
        return str(Markup(
            "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta http-equiv=\"Content-Security-Policy\" content=\"{csp}\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            "<title>{title}</title><style>{css}</style><script>{js}</script></head>"
            "<body>{header}<nav>{links}</nav><main>{body}</main>"
            "<script type=\"application/json\" id=\"evalq-figures\">{figures}</script>"
            "<script>{boot}</script></body></html>\n"
        ).format(csp=csp, title=self.title, css=Markup(_CSS), js=Markup(js), header=header,
                 links=links, body=body, figures=figures, boot=Markup(_BOOT)))


# -- small builders (every argument is escaped unless it is Markup) ----------------------

def note(text: str) -> Markup:
    return Markup('<p class="note">{}</p>').format(text)


def table(headers: Sequence[Any], rows: Iterable[Sequence[Any]],
          numeric: Sequence[int] = ()) -> Markup:
    """A table; a cell may be plain text, ``Markup``, or ``(content, css_class)``."""
    head = Markup("").join(Markup("<th>{}</th>").format(h) for h in headers)
    body = []
    for row in rows:
        cells = []
        for i, cell in enumerate(row):
            css = "num" if i in numeric else ""
            if isinstance(cell, tuple):
                cell, extra = cell
                css = f"{css} {extra}".strip()
            cells.append(Markup('<td class="{}">{}</td>').format(css, cell) if css
                         else Markup("<td>{}</td>").format(cell))
        body.append(Markup("<tr>{}</tr>").format(Markup("").join(cells)))
    return Markup('<div class="scroll"><table><thead><tr>{}</tr></thead><tbody>{}</tbody>'
                  "</table></div>").format(
        head, Markup("").join(body))


def fmt(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def fmt_signed(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:+.{digits}f}"


def fmt_mib(value: float | None) -> str:
    return "—" if value is None else f"{value / 2**20:.1f} MiB"


__all__ = ["Markup", "Page", "escape", "fmt", "fmt_mib", "fmt_signed", "note", "plot_text",
           "table"]
