"""A swept search-time parameter as rows every output prints (issue 30): the console
(``--wide``), the markdown job summary and the HTML report's section
(:mod:`evalq.report.sweep_sections`, which also plots them). Read from the summary's
``sweep`` part only; a folder without one has no rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from evalq.report.runview import RunView
from evalq.results.schema import RunSummary, SweepPoint, SweepSummary

SWEEP_HEADERS = ("dataset", "candidate", "value", "recall@10", "nDCG@10", "overlap@10",
                 "p50 ms", "p99 ms", "queries/s", "gates", "")
SWEEP_NOTE = ("One index built once, searched at each value of one search-time parameter. "
              "recall@10: against the candidate's own exact kNN; overlap@10: against the "
              "reference's exact search; latency per query, searched one at a time. The "
              "gates are tested at each gate's α from the most accurate value down, "
              "stopping at the first that does not pass (fixed sequence: 'not tested' "
              "below it). ★: the cheapest certified value (lowest p50); ●: the value the "
              "candidate's own verdict is for.")


@dataclass(frozen=True)
class SweepRow:
    dataset: str
    variant: str
    sweep: SweepSummary
    point: SweepPoint

    @property
    def cheapest(self) -> bool:
        return self.sweep.cheapest is not None and self.point.value == self.sweep.cheapest

    @property
    def configured(self) -> bool:
        return self.sweep.configured is not None and self.point.value == self.sweep.configured

    def gates_text(self) -> str:
        p = self.point
        if not p.tested:
            return "not tested"
        return p.verdict + (" (exhaustive scan)" if p.exact else "")

    def cells(self) -> tuple[str, ...]:
        p = self.point
        marks = ("★" if self.cheapest else "") + ("●" if self.configured else "")
        return (self.dataset, self.variant, f"{self.sweep.parameter}={p.value:g}",
                _num(p.recall_at_10), _num(p.ndcg_at_10), _num(p.overlap_at_10),
                _num(p.p50_ms, 3), _num(p.p99_ms, 3), _num(p.queries_per_s, 1),
                self.gates_text(), marks)


def _num(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def summary_sweeps(summary: RunSummary | None) -> list[tuple[str, str, SweepSummary]]:
    """Every (dataset, candidate, sweep), in summary order."""
    if summary is None:
        return []
    return [(ds_name, name, entry.sweep) for ds_name, ds in summary.datasets.items()
            for name, entry in ds.variants.items() if entry.sweep is not None]


def sweep_rows(run: RunView) -> list[SweepRow]:
    return [SweepRow(ds, name, sweep, point)
            for ds, name, sweep in summary_sweeps(run.summary) for point in sweep.points]
