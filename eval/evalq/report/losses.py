"""Model, index and end-to-end loss of the candidates searched through an index (issue
30), as rows every output prints: the console (``--wide``), the markdown job summary,
the HTML report's section and ``evalq compare``. Read from the summary's ``losses`` part
only; a folder written before it (or a run with no index) has no rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from evalq.report.runview import RunView
from evalq.results.schema import LossSplit, RunSummary

LOSS_HEADERS = ("dataset", "candidate", "measure", "model loss", "index loss",
                "end-to-end loss")
LOSS_NOTE = ("model loss: the candidate's exact search against the reference's; index "
             "loss: the candidate through its index against its own exact search; end to "
             "end: the candidate through its index against the reference's exact search. "
             "Positive is worse: a drop of the mean (qrels measures), 1 − agreement "
             "(reference measures).")


@dataclass(frozen=True)
class LossRow:
    dataset: str
    variant: str
    metric: str
    split: LossSplit

    def cells(self) -> tuple[str, str, str, str, str, str]:
        return (self.dataset, self.variant, self.metric, loss_text(self.split.model),
                loss_text(self.split.index), loss_text(self.split.end_to_end))


def loss_text(value: float | None) -> str:
    """A loss as every output prints it; one that is no number (a ``NaN`` in a
    hand-edited summary.json) prints as not measured, not as ``+nan``."""
    return "—" if value is None or not math.isfinite(value) else f"{value:+.4f}"


def summary_loss_rows(summary: RunSummary | None) -> list[LossRow]:
    """Every (dataset, candidate, measure) with its three losses, in summary order."""
    if summary is None:
        return []
    return [LossRow(ds_name, name, metric, split)
            for ds_name, ds in summary.datasets.items()
            for name, entry in ds.variants.items()
            for metric, split in (entry.losses or {}).items()]


def loss_rows(run: RunView) -> list[LossRow]:
    return summary_loss_rows(run.summary)
