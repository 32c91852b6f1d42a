"""The encoding-rate ledger and the search plan's time estimate (issue 31).

The plan's estimate used one assumed rate for every weight variant. Now a run keeps what
it measured in ``<cache_dir>/rates.json``, and the plan reads it: per weight variant, on
this host's numerics class only. These tests need no model: the ledger is written by
hand, as a run would write it.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from evalq.encode import rates
from evalq.encode.rates import MIN_TEXTS, RateLedger
from evalq.engines.capability import DeviceInfo
from evalq.plan.search import ASSUMED_COMBINATION_S, ASSUMED_TEXTS_PER_S
from evalq.recipe.plan import build_plan, describe_plan
from evalq.recipe.schema import load_recipe_source
from support import recipes

IDENTITY = {"backend": "sentence-transformers", "dtype": "float32", "model": "abc"}
SEARCH = {"weights": ["fp32", "dyn-int8"],
          "vectors": [{"quantize": "none"}, {"quantize": "int8", "rescore": 4}]}


def test_a_recorded_rate_is_found_again(tmp_path: Path) -> None:
    ledger = RateLedger(tmp_path)
    kept = ledger.record(IDENTITY, texts=400, seconds=2.0, variant="fp32")
    assert kept is not None and kept.texts_per_s == pytest.approx(200.0)
    found = ledger.lookup(dict(IDENTITY))
    assert found == kept
    assert ledger.lookup({**IDENTITY, "dtype": "float16"}) is None  # another engine


def test_the_latest_measurement_wins(tmp_path: Path) -> None:
    ledger = RateLedger(tmp_path)
    ledger.record(IDENTITY, texts=400, seconds=2.0, variant="fp32")
    ledger.record(IDENTITY, texts=400, seconds=4.0, variant="renamed")
    found = ledger.lookup(IDENTITY)
    assert found is not None and found.texts_per_s == pytest.approx(100.0)


def test_too_few_texts_or_no_time_records_nothing(tmp_path: Path) -> None:
    ledger = RateLedger(tmp_path)
    assert ledger.record(IDENTITY, texts=MIN_TEXTS - 1, seconds=1.0, variant="v") is None
    assert ledger.record(IDENTITY, texts=1000, seconds=0.0, variant="v") is None
    assert not ledger.path.exists()


def test_a_rate_of_another_numerics_class_is_not_found(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = RateLedger(tmp_path)
    ledger.record(IDENTITY, texts=400, seconds=2.0, variant="fp32")
    monkeypatch.setattr(rates, "current_class", lambda: "x86-64/some-other-class")
    assert ledger.lookup(IDENTITY) is None


def test_encode_entries_sum_computed_texts_and_seconds(tmp_path: Path) -> None:
    """Cache hits and a borrowed side (``reused``) add nothing; both sides and every
    dataset add up."""
    entries: list[dict[str, Any]] = [
        {"documents": {"n_computed": 300, "n_cached": 50, "seconds_computing": 2.0},
         "queries": {"n_computed": 100, "seconds_computing": 0.5}},
        {"queries": {"n_computed": 100, "seconds_computing": 0.5},
         "reused": {"documents": "reference"}},
    ]
    kept = RateLedger(tmp_path).record_encodes(IDENTITY, entries, "fp32")
    assert kept is not None and kept.texts == 500
    assert kept.texts_per_s == pytest.approx(500 / 3.0)


@pytest.mark.parametrize("damage", ["not json", "[1, 2]", '{"%s": {"texts_per_s": "fast"}}'])
def test_a_damaged_ledger_is_ignored_and_rewritten(tmp_path: Path, damage: str,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    ledger = RateLedger(tmp_path)
    ledger.path.write_text(damage.replace("%s", rates.rate_key(IDENTITY)), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        assert ledger.lookup(IDENTITY) is None
    assert ledger.record(IDENTITY, texts=400, seconds=2.0, variant="fp32") is not None
    assert ledger.lookup(IDENTITY) is not None


def test_an_unwritable_ledger_costs_a_warning_not_the_run(tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture
                                                          ) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        kept = RateLedger(blocker / "cache").record(IDENTITY, texts=400, seconds=2.0,
                                                    variant="fp32")
    assert kept is None
    assert "could not keep the encoding rate" in caplog.text


def _plan(tmp_path: Path) -> Any:
    data = recipes.recipe("grid", cache=tmp_path / "cache", queries=150, docs=300,
                          candidates=[recipes.DYN_INT8],
                          gates=[recipes.gate("nDCG@10", "qrels", max_drop="2%")],
                          search=SEARCH)
    loaded = load_recipe_source(recipes.write(tmp_path / "grid.yaml", data))
    return build_plan(loaded.recipe, loaded.path, located=loaded.located,
                      detect=lambda: DeviceInfo("cpu"))


def test_the_plan_estimates_with_the_rate_measured_here(tmp_path: Path) -> None:
    before = _plan(tmp_path)
    assert before.search.rates == {}
    assert "assumed 100 texts/s for fp32, dyn-int8" in describe_plan(before)
    fp32 = next(v for v in before.variants if v.name == "fp32")
    RateLedger(tmp_path / "cache").record(fp32.rate_identity(), texts=900, seconds=1.0,
                                          variant="fp32")
    after = _plan(tmp_path)
    assert set(after.search.rates) == {"fp32"}
    combos = len(after.search.combinations) * ASSUMED_COMBINATION_S
    assert after.search.estimate_s() == pytest.approx(450 / 900 + 450 / ASSUMED_TEXTS_PER_S
                                                      + combos)
    text = describe_plan(after)
    assert "measured on this host" in text and "fp32 900/s" in text
    assert "assumed 100 texts/s for dyn-int8" in text
    stored = json.loads((tmp_path / "cache" / "rates.json").read_text(encoding="utf-8"))
    assert [e["variant"] for e in stored.values()] == ["fp32"]


def test_no_cache_plans_with_the_assumed_rate(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    fp32 = next(v for v in plan.variants if v.name == "fp32")
    RateLedger(tmp_path / "cache").record(fp32.rate_identity(), texts=900, seconds=1.0,
                                          variant="fp32")
    data = load_recipe_source(tmp_path / "grid.yaml")
    loose = build_plan(data.recipe, data.path, located=data.located, use_cache=False,
                       detect=lambda: DeviceInfo("cpu"))
    assert loose.search.rates == {}


def test_a_damaged_ledger_warns_once_per_plan(tmp_path: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    """Two weight variants, one read of the ledger: one warning, not one per variant."""
    (tmp_path / "cache").mkdir()
    RateLedger(tmp_path / "cache").path.write_text("not json", encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        plan = _plan(tmp_path)
    assert plan.search.rates == {}
    assert caplog.text.count("ignoring the encoding-rate ledger") == 1
