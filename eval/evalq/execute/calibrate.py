"""`evalq calibrate [RESULTS_DIR]`: the gate's error rates on the synthetic panel, and on
the per-query differences of a finished results folder.

The simulation itself (:mod:`evalq.decide.calibration`) is a pure function of arrays; this
module is the command around it: it reads a results folder, with the deciding sections of
the recipe its manifest stores (which the app reads back), so it belongs with the other
commands that take a folder, not with the statistics.
"""

from __future__ import annotations

import math
from pathlib import Path

from evalq.core import atomicio
from evalq.core.errors import InputError
from evalq.decide.calibration import (
    DEFAULT_RULE,
    Population,
    calibrate,
    detail,
    report,
    synthetic_panel,
    table,
)
from evalq.decide.gate import paired_values
from evalq.decide.search_calibration import Setting, simulate_search
from evalq.decide.search_calibration import report as search_report
from evalq.decide.search_calibration import table as search_table
from evalq.plan.gates import gate_spec
from evalq.plan.run import RunSections
from evalq.results.folder import RunFolder


def results_populations(folder: str | Path, sections: RunSections) -> list[Population]:
    """Per-query differences of every candidate × dataset × allowed-drop gate of a results
    folder, with the margin that gate used; ``sections``: the deciding parts of the recipe
    its manifest stores (the app reads them back, ``evalq.recipe.stored``)."""
    run = RunFolder(folder)
    manifest = run.read_manifest()  # typed: a damaged file is an InputError naming the field
    reference = sections.reference
    if reference not in manifest.variants:
        raise InputError(message=f"the manifest has no variant '{reference}' (the recipe's "
                         "reference)", file=run.root / "manifest.json", field="variants",
                         fix="rerun 'evalq run' to write a fresh folder")
    specs = [gate_spec(g, sections.stats.confidence, sections.stats) for g in sections.gates]
    specs = [s for s in specs if s.max_drop is not None]
    populations = []
    for ds in manifest.variants[reference].datasets:
        ref = run.read_per_query(ds, reference)
        for name in manifest.variants:
            if name == reference:
                continue
            cand = run.read_per_query(ds, name, like=ref)
            for spec in specs:
                c, r = paired_values(spec, cand, ref)
                assert spec.max_drop is not None
                margin = spec.max_drop * float(r.mean()) if spec.relative else spec.max_drop
                populations.append(Population(f"{name}/{ds}/{spec.metric}", str(folder),
                                              c - r, margin))
    return populations


# 50x the default: the Monte Carlo sd of a 2.5% rate is then 0.0005, far below any
# decision; beyond it the draws (trials x queries x 8 bytes) can exhaust memory.
MAX_TRIALS = 100_000


def calibrate_report(results: Path | None, sections: RunSections | None = None, *,
                     trials: int = 2000,
                     json_path: Path | None = None) -> str:
    """`evalq calibrate [RESULTS_DIR]`: the table as text (the app prints it), and the
    JSON written when asked for."""
    if trials < 50:
        raise InputError(message=f"--trials {trials} is too few to estimate a 2.5% rate",
                         field="--trials", fix="use --trials 2000 (the default) or at least 50")
    if trials > MAX_TRIALS:  # refused before the draws are allocated (trials x queries)
        raise InputError(message=f"--trials {trials} is more than the {MAX_TRIALS:,} this "
                         "command allows: the simulation holds trials x queries draws in "
                         "memory", field="--trials",
                         fix=f"use --trials 2000 (the default) or at most {MAX_TRIALS}")
    if json_path is not None:  # before the simulation, not after it
        atomicio.check_output_location(json_path, folder=False, field="--json")
    populations = synthetic_panel()
    if results is not None:
        if sections is None:
            raise ValueError("calibrate_report needs the stored recipe's sections with a "
                             "results folder")
        populations = results_populations(results, sections) + populations
    cells = calibrate(populations, trials=trials)
    if json_path is not None:
        atomicio.write_json(json_path, report(cells))
    default_ok = all(c.within_bound for c in cells if c.rule == DEFAULT_RULE.name and c.n >= 50)
    return "\n".join([
        f"false-pass = pass rate with the true mean exactly at −margin (nominal "
        f"{cells[0].bound - 3 * math.sqrt(0.025 * 0.975 / trials):.3f} one-sided; bound "
        f"allows 3 Monte Carlo sd: {cells[0].bound:.4f}); {trials} trials per cell",
        table(cells), "", detail(cells, ["percentile", DEFAULT_RULE.name]),
        f"default {DEFAULT_RULE.name} within bound on every population for n >= 50: "
        f"{default_ok}"])


# The grids the search's calibration simulates: the sizes (18 and 30 points), at
# 100 confirm queries and, for the larger grid, at 300.
SEARCH_SETTINGS = (Setting(18), Setting(30), Setting(30, queries=600))
# More simulated searches than this narrow nothing a reader needs and take days: 10**12
# used to end in "out of memory. Fix: lower max_docs", knobs calibrate does not have.
MAX_SEARCHES = 100_000


def search_calibration_report(*, searches: int = 2000, resamples: int = 499,
                              json_path: Path | None = None) -> str:
    """`evalq calibrate --search`: the grid search's family-wise false-pass rate under the
    least favourable null, with the naive and uncorrected procedures as contrasts
    (:mod:`evalq.decide.search_calibration`), as text; the JSON written when asked for."""
    if searches < 50:
        raise InputError(message=f"--searches {searches} is too few to estimate a 2.5% rate",
                         field="--searches", fix="use --searches 2000 (the default) or at "
                         "least 50")
    if searches > MAX_SEARCHES:
        raise InputError(message=f"--searches {searches} would run for days (2000, the "
                         "default, takes minutes) or exhaust memory",
                         field="--searches", fix=f"use at most {MAX_SEARCHES:,}: its "
                         "95% interval around a 2.5% rate is already ±0.1%")
    if json_path is not None:
        atomicio.check_output_location(json_path, folder=False, field="--json")
    rates = []
    for setting in SEARCH_SETTINGS:
        rates += simulate_search(synthetic_panel(), setting, searches=searches,
                                 resamples=resamples)
    if json_path is not None:
        atomicio.write_json(json_path, search_report(rates))
    return "\n".join([
        f"family-wise false pass = a run certifying any point when every point's true drop "
        f"is exactly the margin; {searches} searches per population; 95% Clopper-Pearson "
        "intervals", search_table(rates)])
