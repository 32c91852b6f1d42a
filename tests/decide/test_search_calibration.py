"""The grid search's family-wise false-pass rate, simulated under the least favourable null
(every configuration's true drop exactly at the margin): a small seeded run of
``evalq calibrate --search`` (the full run is ``bench/search_calibration.py``).

The search (explore/confirm split, survivors, Holm through the gates' verdicts) must be
consistent with at most alpha; the naive procedure (every configuration gated at full
alpha, any pass kept) must visibly not be, in the same draws: the test can tell the two
apart, so replacing Holm by no correction fails it.
"""

from __future__ import annotations

import numpy as np
import pytest

from evalq.decide.calibration import synthetic_panel
from evalq.decide.search_calibration import (
    Rate,
    Setting,
    clopper_pearson,
    grid_populations,
    report,
    simulate_search,
    table,
)

ALPHA = 0.025


@pytest.fixture(scope="module")
def rates() -> list[Rate]:
    return simulate_search(synthetic_panel(size=2000), Setting(30, keep=5, queries=200),
                           searches=200, resamples=399, seed=3)


def _pooled(rates: list[Rate], procedure: str) -> Rate:
    return next(r for r in rates if r.population == "all" and r.procedure == procedure)


def test_the_search_keeps_the_family_wise_rate(rates: list[Rate]) -> None:
    search = _pooled(rates, "search")
    assert search.searches == 200 * len(synthetic_panel())
    assert search.low <= ALPHA, table(rates)
    assert search.low <= search.rate <= search.high


def test_no_population_exceeds_the_family_wise_rate(rates: list[Rate]) -> None:
    # Each population alone, not only the pool: the gate's rule must hold the smaller
    # per-test levels Holm asks of it on sparse differences too.
    searches = [r for r in rates if r.procedure == "search" and r.population != "all"]
    worst = max(searches, key=lambda r: r.rate)
    assert worst.low <= ALPHA, table(rates)


def test_the_naive_procedure_falls_into_the_trap(rates: list[Rate]) -> None:
    naive = _pooled(rates, "naive")
    uncorrected = _pooled(rates, "split without correction")
    # Clearly above alpha, in the same run: the test tells a corrected search from these.
    assert naive.low > 4 * ALPHA, table(rates)
    assert uncorrected.low > ALPHA, table(rates)
    assert naive.rate > uncorrected.rate > _pooled(rates, "search").rate


def test_report_is_json_ready(rates: list[Rate]) -> None:
    data = report(rates)
    assert {r["procedure"] for r in data["rates"]} == {"search", "split without correction",
                                                       "naive"}
    assert "95% CP interval" in table(rates)


def test_clopper_pearson_known_values() -> None:
    low, high = clopper_pearson(0, 100)
    assert low == 0.0 and high == pytest.approx(0.0362, abs=1e-4)
    low, high = clopper_pearson(5, 100)
    assert low == pytest.approx(0.0164, abs=1e-4) and high == pytest.approx(0.1128, abs=1e-4)
    assert clopper_pearson(10, 10)[1] == 1.0


def test_grid_configurations_sit_at_the_margin_and_share_queries() -> None:
    base = next(p for p in synthetic_panel(size=2000) if p.name == "dense-normal")
    grid = grid_populations(base, 6, 0.5, np.random.default_rng(0))
    assert grid.shape == (6, 2000)
    np.testing.assert_allclose(grid.mean(axis=1), -base.margin, atol=1e-12)
    corr = np.corrcoef(grid)[np.triu_indices(6, 1)]
    assert 0.3 < corr.mean() < 0.7  # the shared query effect: correlated, not identical
