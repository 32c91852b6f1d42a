"""What a report contains: the built-in section modules, by name, and the sections a
results folder gets from them.

The section modules register their renderers with :func:`evalq.report.sections.section`
when imported; this table imports them explicitly (not for a side effect hidden in a
function), so the registry module itself knows none of its plug-ins.
"""

from __future__ import annotations

from types import ModuleType

from evalq.report import (
    loss_sections,
    pipeline_sections,
    retrieval_cost_sections,
    retrieval_sections,
    search_sections,
    sweep_sections,
)
from evalq.report.runview import RunView
from evalq.report.sections import Section, all_sections, kinds_of

# The built-in kinds' section modules, in the order their kinds appear in a report.
BUILTIN: tuple[ModuleType, ...] = (retrieval_sections, retrieval_cost_sections,
                                   loss_sections, sweep_sections, pipeline_sections,
                                   search_sections)


def sections_for(run: RunView) -> list[Section]:
    kinds = set(kinds_of(run))
    return [s for s in registered() if s.kind in kinds]


def registered() -> list[Section]:
    return sorted(all_sections(), key=lambda s: s.order)
