"""The HTML report's section for candidates searched through an index (result kind
``index-losses``, issue 30): each measure's model, index and end-to-end loss, from the
rows the console and markdown print (:mod:`evalq.report.losses`). A folder with no such
candidate (or written before the split was stored) has no section.
"""

from __future__ import annotations

from markupsafe import Markup

from evalq.report.html import Page, note, table
from evalq.report.losses import LOSS_HEADERS, LOSS_NOTE, loss_rows
from evalq.report.runview import RunView
from evalq.report.sections import KIND_DETECTORS, section

KIND = "index-losses"
KIND_DETECTORS[KIND] = lambda run: bool(loss_rows(run))


@section("losses", "Model loss and index loss", kind=KIND, order=35)
def losses_section(run: RunView, page: Page) -> Markup:
    rows = loss_rows(run)
    return Markup("").join([note(LOSS_NOTE),
                            table(LOSS_HEADERS, [r.cells() for r in rows],
                                  numeric=(3, 4, 5))])
