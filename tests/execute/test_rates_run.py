"""A real run keeps its measured encoding rates, and the next search plan uses them
(issue 31: the plan's time estimate comes from this host, not a constant).

Runs the real MiniLM on a small pydocs slice, fp32 and torch dynamic int8, with a cache;
then plans a search over the same two weight variants on that cache. Only the bookkeeping
is asserted (which variant has a rate, that it is the run's own texts over seconds), never
a speed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalq.app.api import run_recipe_file
from evalq.engines.capability import DeviceInfo
from evalq.recipe.plan import build_plan, describe_plan
from evalq.recipe.schema import load_recipe_source
from support import recipes

pytestmark = [pytest.mark.model]


def test_a_run_keeps_its_rates_for_the_next_plan(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    common = {"cache": cache, "queries": 40, "docs": 60, "candidates": [recipes.DYN_INT8],
              "gates": [recipes.gate("nDCG@10", "qrels", max_drop="50%")],
              "parity": {"enabled": False}}
    run = recipes.write(tmp_path / "run.yaml", recipes.recipe("rates", **common))
    run_recipe_file(run, output=tmp_path / "out", progress=False)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text(encoding="utf-8"))
    variants = manifest["variants"]
    ledger = json.loads((cache / "rates.json").read_text(encoding="utf-8"))
    assert sorted(e["variant"] for e in ledger.values()) == ["dyn-int8", "fp32"]
    for entry in ledger.values():
        encode = variants[entry["variant"]]["datasets"]["pydocs"]["encode"]
        computed = [encode[s]["n_computed"] for s in ("documents", "queries")]
        seconds = sum(encode[s]["seconds_computing"] for s in ("documents", "queries"))
        assert entry["texts"] == sum(computed) == 100
        assert entry["texts_per_s"] == pytest.approx(100 / seconds)
    search = {"weights": ["fp32", "dyn-int8"], "vectors": [{"quantize": "none"}]}
    grid = recipes.write(tmp_path / "grid.yaml",
                         recipes.recipe("grid", search=search, **common))
    loaded = load_recipe_source(grid)
    plan = build_plan(loaded.recipe, loaded.path, located=loaded.located,
                      detect=lambda: DeviceInfo("cpu"))
    assert set(plan.search.rates) == {"fp32", "dyn-int8"}
    text = describe_plan(plan)
    assert "measured on this host" in text and "assumed" not in text.split("estimate:")[1] \
        .split("\n")[0]
