"""Fault class "a hostile encoding-rate ledger" (issue 32): ``<cache_dir>/rates.json`` is
a hint for a search plan's time estimate and must never fail a run or a plan, nor print a
NaN, infinite or negative estimate. A ledger holding NaN (hand-edited, or written by
another tool) made the next run's ``record`` fail after a variant had finished (JSON
writes refuse NaN), an infinite text count failed the plan with OverflowError, a deeply
nested file with RecursionError, and a denormal rate printed 'about inf s'."""

from __future__ import annotations

import json
import math
import os
import threading
from pathlib import Path

import pytest

from evalq.core.host import current_class
from evalq.encode.rates import LEDGER_NAME, RateLedger, rate_key
from evalq.plan.search import ASSUMED_TEXTS_PER_S, _rate

IDENTITY = {"backend": "sentence-transformers", "dtype": "float32"}


def _write(tmp_path: Path, text: str) -> RateLedger:
    (tmp_path / LEDGER_NAME).write_text(text)
    return RateLedger(tmp_path)


def _entry(**over: object) -> dict[str, object]:
    return {"texts_per_s": 100.0, "texts": 500, "measured": "2026-01-01T00:00:00+00:00",
            "numerics_class": current_class(), "variant": "v", **over}


@pytest.mark.parametrize("entry", [
    _entry(texts_per_s=float("nan")), _entry(texts_per_s=float("inf")),
    _entry(texts_per_s=-5.0), _entry(texts_per_s=0.0), _entry(texts_per_s=5e-324),
    _entry(texts=float("inf")), _entry(texts=float("nan")), _entry(texts=3),
    _entry(texts_per_s="fast"), _entry(texts_per_s=[1]), _entry(measured=None) | {"texts": {}},
    _entry(numerics_class="arm64/neon"),
])
def test_an_impossible_entry_is_no_rate(tmp_path: Path, entry: dict[str, object]) -> None:
    ledger = _write(tmp_path, json.dumps({rate_key(IDENTITY): entry}))
    assert ledger.lookup(IDENTITY) is None


def test_a_deeply_nested_ledger_is_ignored(tmp_path: Path) -> None:
    ledger = _write(tmp_path, "[" * 200_000)
    assert ledger.lookup(IDENTITY) is None
    assert ledger.record(IDENTITY, 100, 1.0, "v") is not None


def test_recording_over_a_ledger_with_nan_keeps_the_rate(tmp_path: Path) -> None:
    other = {"a" * 24: _entry(texts_per_s=float("nan")), "b" * 24: _entry(texts=float("inf"))}
    ledger = _write(tmp_path, json.dumps(other))
    rate = ledger.record(IDENTITY, 100, 2.0, "v")
    assert rate is not None and rate.texts_per_s == 50.0
    assert ledger.lookup(IDENTITY) == rate
    kept = json.loads((tmp_path / LEDGER_NAME).read_text())
    assert list(kept) == [rate_key(IDENTITY)]  # the impossible entries are dropped


@pytest.mark.parametrize("texts,seconds", [(100, float("nan")), (100, float("inf")),
                                           (100, -1.0), (100, 0.0), (10**400, 1.0)])
def test_recording_an_impossible_measurement_records_nothing(
        tmp_path: Path, texts: int, seconds: float) -> None:
    ledger = RateLedger(tmp_path)
    assert ledger.record(IDENTITY, texts, seconds, "v") is None
    assert ledger.lookup(IDENTITY) is None


def test_a_ledger_that_is_a_folder_or_unwritable_fails_nothing(tmp_path: Path) -> None:
    (tmp_path / LEDGER_NAME).mkdir()
    ledger = RateLedger(tmp_path)
    assert ledger.lookup(IDENTITY) is None
    assert ledger.record(IDENTITY, 100, 1.0, "v") is None
    assert ASSUMED_TEXTS_PER_S > 0 and math.isfinite(ASSUMED_TEXTS_PER_S)


def test_a_slow_measured_rate_prints_as_itself_not_zero() -> None:
    """0.4 texts/s (a large model on two cores) was printed '0/s' by the plan's line."""
    assert _rate(0.4) == "0.4" and _rate(1.726) == "1.7" and _rate(123.6) == "124"


def test_a_sound_entry_of_this_host_is_found(tmp_path: Path) -> None:
    ledger = _write(tmp_path, json.dumps({rate_key(IDENTITY): _entry()}))
    found = ledger.lookup(IDENTITY)
    assert found is not None and found.texts_per_s == 100.0


def test_a_ledger_that_is_a_fifo_is_ignored_not_waited_on(tmp_path: Path) -> None:
    """Opening a FIFO for reading blocks until a writer comes: the plan hung."""
    os.mkfifo(tmp_path / LEDGER_NAME)
    ledger = RateLedger(tmp_path)
    found: list[object] = []
    reader = threading.Thread(target=lambda: found.append(ledger.lookup(IDENTITY)),
                              daemon=True)
    reader.start()
    reader.join(timeout=60)  # a hang guard, not a timing: the fixed read never opens it
    if reader.is_alive():
        with open(tmp_path / LEDGER_NAME, "w"):  # release the blocked reader
            pass
        pytest.fail("reading a FIFO ledger blocked")
    assert found == [None]
    assert ledger.record(IDENTITY, 100, 1.0, "v") is not None  # replaced by a file
    assert ledger.lookup(IDENTITY) is not None


def test_a_huge_ledger_is_ignored_without_reading_it(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("evalq.encode.rates.MAX_LEDGER_BYTES", 1000)
    entries = {rate_key(IDENTITY): _entry()} | {f"{i:024x}": _entry() for i in range(50)}
    ledger = _write(tmp_path, json.dumps(entries))
    assert ledger.lookup(IDENTITY) is None
    assert ledger.record(IDENTITY, 100, 1.0, "v") is not None  # starts a fresh ledger
