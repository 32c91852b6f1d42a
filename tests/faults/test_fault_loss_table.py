"""Fault class "a loss table fed hostile names and numbers" (issue 32): the compact
console's loss table (``evalq.report.compact._print_losses``) prints candidate and
dataset names as text (a ``[red]`` is not markup), keeps a 200-character name to its
column, and prints a NaN loss from a hand-edited summary.json as not measured, not as
``+nan``."""

from __future__ import annotations

import io
import math

from rich.console import Console

from evalq.report.compact import _print_losses
from evalq.report.losses import LossRow, loss_text
from evalq.results.schema import LossSplit


class _Run:
    def __init__(self, rows: list[LossRow], datasets: list[str]) -> None:
        self.rows, self.datasets = rows, datasets

    def gated_metrics(self) -> list[str]:
        return ["nDCG@10"]

    def headline_metric(self) -> str:
        return "nDCG@10"


def test_nan_and_infinite_losses_print_as_not_measured() -> None:
    assert loss_text(math.nan) == "—" and loss_text(math.inf) == "—"
    assert loss_text(None) == "—" and loss_text(-0.0125) == "-0.0125"


def test_hostile_names_and_nan_in_the_console_table(monkeypatch) -> None:
    names = ["[red]db[/red]", "x" * 200, "[bold]"]
    datasets = [f"ds{i}[/]" for i in range(30)]
    rows = [LossRow(ds, name, "nDCG@10",
                    LossSplit(against="qrels", model=math.nan, index=0.01, end_to_end=None))
            for ds in datasets for name in names]
    monkeypatch.setattr("evalq.report.compact.loss_rows", lambda run: rows)
    out = io.StringIO()
    _print_losses(Console(file=out, width=100), _Run(rows, datasets))
    text = out.getvalue()
    assert "nan" not in text and "[red]db[/red]" in text and "ds29[/]" in text
    assert max(len(line) for line in text.splitlines()) <= 100
    assert text.count("+0.0100") == len(rows)
