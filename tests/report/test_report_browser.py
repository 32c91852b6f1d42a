"""The HTML report in a real headless Chromium (Debian's ``chromium``, driven by
Playwright; Playwright's own browser download is never used).

Checked in the browser, not by grepping: every section renders with its figures drawn,
the console shows no errors (the page's Content-Security-Policy would report any blocked
script there), no request leaves the page, the screenshot is not blank, and hostile
corpus, query and variant texts are displayed as text and execute nothing.

Without chromium this module fails with the install command: it never skips.
"""

from __future__ import annotations

import io
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from search_summaries import HOSTILE, write_search_folder

from evalq.app.cli import main
from evalq.report.contents import registered
from support.report_runs import HOSTILE_VARIANT, PAYLOADS

pytestmark = [pytest.mark.process, pytest.mark.slow, pytest.mark.model]

CHROMIUM_ARGS = ["--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-dev-shm-usage"]


def chromium_path() -> str:
    found = os.environ.get("EVALQ_CHROMIUM") or shutil.which("chromium") \
        or shutil.which("chromium-browser")
    if not found:
        pytest.fail("the report's browser tests need Debian's chromium: run "
                    "'apt-get install -y chromium' as root ('make test' does), or set "
                    "EVALQ_CHROMIUM to a Chromium binary", pytrace=False)
    return found


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        yield b
        b.close()


@dataclass
class Loaded:
    page: Any
    url: str
    console: list[tuple[str, str]] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[tuple[str, str]]:
        return [m for m in self.console if m[0] in ("error", "pageerror")]


def open_report(browser: Any, html: Path) -> Loaded:
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    loaded = Loaded(page, html.resolve().as_uri())
    page.on("console", lambda m: loaded.console.append((m.type, m.text)))
    page.on("pageerror", lambda e: loaded.console.append(("pageerror", str(e))))
    page.on("request", lambda r: loaded.requests.append(r.url))

    def on_dialog(dialog: Any) -> None:
        loaded.dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    page.goto(loaded.url)
    page.wait_for_function("document.documentElement.getAttribute('data-rendered') !== null",
                           timeout=120_000)
    page.wait_for_timeout(300)  # let late handlers (an injected onerror) fire, if any
    return loaded


def _report(run: Path, out: Path) -> Path:
    assert main(["report", str(run), "-o", str(out)]) == 0
    return out


def _assert_clean(loaded: Loaded) -> None:
    assert loaded.errors == []
    assert loaded.requests == [loaded.url], "the page must not request anything"
    # every figure placeholder holds a drawn plotly SVG
    counts = loaded.page.evaluate(
        "[document.querySelectorAll('div.plot').length,"
        " document.querySelectorAll('div.plot .main-svg').length > 0 ?"
        " Array.from(document.querySelectorAll('div.plot')).filter("
        "   d => d.querySelector('.main-svg')).length : 0]")
    assert counts[0] > 0 and counts[0] == counts[1]


def _not_blank(png: bytes) -> None:
    from PIL import Image

    image = Image.open(io.BytesIO(png)).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50
    grey = image.convert("L")
    dark = sum(grey.histogram()[:200])
    assert dark / (grey.width * grey.height) > 0.01


def test_report_renders_every_section_without_errors_or_requests(
        report_runs, browser, tmp_path: Path) -> None:
    loaded = open_report(browser, _report(report_runs.small, tmp_path / "report.html"))
    _assert_clean(loaded)
    page = loaded.page
    ids = page.evaluate("Array.from(document.querySelectorAll('main > section')).map(s => s.id)")
    assert ids == [s.id for s in registered() if s.kind == "retrieval"]
    for s in registered():
        if s.kind != "retrieval":  # a run without pipelines has no pipeline sections
            continue
        assert page.locator(f"section#{s.id}").is_visible()
        assert page.locator(f"nav a[href='#{s.id}']").count() == 1
    text = page.inner_text("body")
    assert "Recommendation:" in text and "report.cost" in text
    assert "binary-plain" in page.inner_text("section#verdict")
    # the most-hurt view shows the two top-10 lists with document texts
    assert page.locator("section#per-query .hurt").count() > 0
    assert page.locator("section#per-query .hurt td.snippet").first.inner_text().strip()
    _not_blank(page.screenshot(full_page=False))
    page.close()


def test_hostile_texts_are_shown_as_text_and_run_nothing(report_runs, browser,
                                                         tmp_path: Path) -> None:
    loaded = open_report(browser, _report(report_runs.xss, tmp_path / "xss.html"))
    _assert_clean(loaded)  # a handler blocked by the CSP would be a console error
    page = loaded.page
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert loaded.dialogs == []
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert page.evaluate("document.scripts.length") == 3  # plotly, figure data, boot
    # variant name: in the tables and in plotly's legends, as literal text
    names = page.locator(".variant").all_inner_texts()
    assert HOSTILE_VARIANT in names
    legends = page.evaluate("Array.from(document.querySelectorAll('.legendtext'))"
                            ".map(t => t.textContent)")
    assert HOSTILE_VARIANT in legends
    # query text and corpus text: in the most-hurt view
    queries = " ".join(page.locator(".query-text").all_inner_texts())
    snippets = " ".join(page.locator("td.snippet").all_inner_texts())
    assert queries and snippets
    for payload in PAYLOADS:
        assert payload in queries or payload in snippets
    assert any(p in queries for p in PAYLOADS) and any(p in snippets for p in PAYLOADS)
    assert "</script>" in queries + snippets
    page.close()


@pytest.mark.parametrize("which,missing", [
    ("failed", "the run did not finish"),
    ("no_cosines", "no per-text cosines stored"),
])
def test_folder_missing_optional_parts_still_renders(report_runs, browser, tmp_path: Path,
                                                     which: str, missing: str) -> None:
    loaded = open_report(browser, _report(getattr(report_runs, which), tmp_path / "r.html"))
    assert loaded.errors == [] and loaded.requests == [loaded.url]
    page = loaded.page
    for s in registered():
        assert page.locator(f"section#{s.id}").count() == (s.kind == "retrieval")
    notes = " ".join(page.locator(".note").all_inner_texts())
    assert missing in notes
    if which == "failed":
        assert "remote" in page.inner_text("section#verdict")
        assert "did not run" in page.inner_text("section#verdict")
    else:
        assert "ids only" in notes  # no texts/ either
    page.close()


def test_history_page_renders(report_runs, browser, tmp_path: Path) -> None:
    out = tmp_path / "history.html"
    assert main(["report", str(report_runs.small), str(report_runs.again), "-o",
                 str(out)]) == 0
    loaded = open_report(browser, out)
    _assert_clean(loaded)
    page = loaded.page
    for sid in ("runs", "gates-history", "cost-history", "verdict-history"):
        assert page.locator(f"section#{sid}").is_visible()
    legends = page.evaluate("Array.from(document.querySelectorAll('.legendtext'))"
                            ".map(t => t.textContent)")
    assert "gate threshold" in legends
    assert page.locator("section#runs tbody tr").count() == 2
    page.close()


def test_search_frontier_plot_renders(browser, tmp_path: Path) -> None:
    """A grid search's section (issue 31): the frontier plot drawn with a legend entry per
    mark, the frontier line and the labelled recommendation; a hostile point name stays
    text."""
    run = write_search_folder(tmp_path / "search-run")
    loaded = open_report(browser, _report(run, tmp_path / "search.html"))
    _assert_clean(loaded)
    page = loaded.page
    section = page.locator("section#search")
    assert section.is_visible() and page.locator("nav a[href='#search']").count() == 1
    assert section.locator("div.plot .main-svg").count() > 0
    legends = section.evaluate("s => Array.from(s.querySelectorAll('.legendtext'))"
                               ".map(t => t.textContent)")
    for name in ("certified (2)", "failed (1)", "inconclusive (1)", "not confirmed (2)",
                 "Pareto frontier", "recommendation: int8-w/int8/384"):
        assert name in legends
    # one drawn marker per point (6) plus the star; the frontier as one line
    points = section.evaluate("s => s.querySelectorAll('.scatterlayer .point').length")
    assert points == 6 + 1
    assert section.evaluate("s => s.querySelectorAll('.scatterlayer .js-line').length") >= 1
    notes = section.evaluate("s => Array.from(s.querySelectorAll('.annotation-text'))"
                             ".map(t => t.textContent)")
    assert "int8-w/int8/384" in notes
    text = section.inner_text()
    assert "Holm over 4 survivors" in text and HOSTILE in text  # shown as text
    assert page.evaluate("typeof window.__xss") == "undefined" and loaded.dialogs == []
    _not_blank(section.screenshot())
    page.close()
