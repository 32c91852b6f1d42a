"""Report sections as plug-ins: one renderer per section, grouped by result kind.

A results folder holds one or more *kinds* of result: every run today holds
``retrieval`` (embedding variants scored against qrels and the reference); rerank
pipelines and load tests will add their own kinds. A kind's sections register here with
:func:`section`; the page renders, in ``order``, every section whose kind the folder
holds. A new kind therefore adds a module with its sections and a detector in
:data:`KIND_DETECTORS`, and one line in :mod:`evalq.report.contents` (the table of the
built-in section modules).

A section renders from the :class:`~evalq.report.runview.RunView` only (never from a
live run) and says in the page what is missing rather than failing: a report of an old
or partial folder still renders.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from markupsafe import Markup

from evalq.report.html import Page
from evalq.report.runview import RunView


class SectionRenderer(Protocol):
    def __call__(self, run: RunView, page: Page) -> Markup: ...


@dataclass(frozen=True)
class Section:
    id: str  # the HTML id of the <section>; tests and links rely on it
    title: str
    kind: str
    order: int
    render: SectionRenderer


_SECTIONS: dict[str, Section] = {}

# Which result kinds a folder holds. A kind's module adds its detector here.
KIND_DETECTORS: dict[str, Callable[[RunView], bool]] = {
    "retrieval": lambda run: bool(run.manifest.datasets or run.datasets),
}


def section(id: str, title: str, *, kind: str, order: int) -> Callable[
        [SectionRenderer], SectionRenderer]:
    """Register a renderer; a second registration of the same id is refused (two
    modules fighting over one section would otherwise depend on import order)."""

    def register(render: SectionRenderer) -> SectionRenderer:
        if id in _SECTIONS:
            raise ValueError(f"report section {id!r} is already registered")
        _SECTIONS[id] = Section(id, title, kind, order, render)
        return render

    return register


def kinds_of(run: RunView) -> list[str]:
    return [kind for kind, detect in KIND_DETECTORS.items() if detect(run)]


def all_sections() -> list[Section]:
    """Every registered section (the registry's contents, unordered)."""
    return list(_SECTIONS.values())
