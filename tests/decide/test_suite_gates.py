"""Gates over a suite of datasets (pydocs + beir-tiny) with the real MiniLM.

Pooled gates are one verdict on the macro-average of per-dataset mean differences;
per-dataset checks carry the dataset in their label and JUnit name; the parity preflight
is one check per variant however many datasets there are; `evalq gate` reproduces the
verdicts and re-decides results written before interval methods with the percentile
bootstrap (their historical method).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalq.app.api import run_recipe_file
from evalq.app.cli import main
from evalq.core.gates import DEFAULT_METHOD, GateSpec
from evalq.decide.gate import decide_pooled
from evalq.results.folder import RunFolder
from support import recipes

ROOT = Path(__file__).resolve().parents[2]

def _recipe(cache: Path) -> dict[str, Any]:
    return recipes.recipe(
        "suite-test", cache=cache, datasets=["pydocs", "beir-tiny"], queries=40, docs=150,
        candidates=[{"name": "fp32-again"},  # same weights: the parity preflight checks it
                    recipes.DYN_INT8],
        metrics=["nDCG@10", "RR@10"], reference_metrics=["overlap@10"],
        gates=[recipes.gate("nDCG@10", "qrels", max_drop="2%", over="pooled"),
               recipes.gate("RR@10", "qrels", max_drop="2%", confidence=0.9),
               recipes.gate("overlap@10", "reference", min=0.8)],
        resamples=1000)


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("suite")
    recipe = recipes.write(base / "suite.yaml", _recipe(base / "cache"))
    # the dataset manifests live in the repository's datasets/ folder
    (base / "datasets").symlink_to(ROOT / "datasets")
    outcome = run_recipe_file(recipe, output=base / "out", progress=False)
    return {"outcome": outcome, "out": base / "out"}


@pytest.mark.slow
@pytest.mark.model
def test_summary_records_the_suite(suite: dict[str, Any]) -> None:
    summary = suite["outcome"].summary
    assert summary["suite"]["datasets"] == ["pydocs", "beir-tiny"]
    assert {"gate": "nDCG@10 vs qrels max_drop 2%", "over": "pooled"} in \
        summary["suite"]["gates"]
    assert summary["stats"]["method"] == DEFAULT_METHOD
    for ds in ("pydocs", "beir-tiny"):
        labels = [c["gate"] for c in summary["datasets"][ds]["variants"]["dyn-int8"]["gate"]
                  ["checks"]]
        assert labels == [f"RR@10 vs qrels max_drop 2% on {ds}",
                          f"overlap@10 vs reference min 0.8 on {ds}"]


@pytest.mark.slow
@pytest.mark.model
def test_pooled_gate_is_the_macro_average(suite: dict[str, Any]) -> None:
    folder = RunFolder(suite["out"])
    checks = suite["outcome"].summary["variants"]["dyn-int8"]["suite_checks"]
    pooled = [c for c in checks if c["figures"].get("over") == "pooled"]
    assert len(pooled) == 1
    check = pooled[0]
    assert check["gate"] == "nDCG@10 vs qrels max_drop 2% pooled over pydocs, beir-tiny"
    deltas, refs = [], []
    for ds in ("pydocs", "beir-tiny"):
        ref = folder.read_per_query(ds, "fp32").values["nDCG@10"]
        cand = folder.read_per_query(ds, "dyn-int8").values["nDCG@10"]
        deltas.append((cand - ref).mean())
        refs.append(ref.mean())
    assert check["figures"]["delta"] == pytest.approx(np.mean(deltas))
    assert check["figures"]["margin"] == pytest.approx(0.02 * np.mean(refs))
    assert check["figures"]["datasets"] == 2
    assert check["figures"]["method"] == DEFAULT_METHOD


@pytest.mark.slow
@pytest.mark.model
def test_parity_once_per_variant_and_junit_names_unique(suite: dict[str, Any],
                                                       tmp_path: Path) -> None:
    summary = suite["outcome"].summary
    parity = [c for c in summary["variants"]["fp32-again"]["suite_checks"]
              if c["gate"].startswith("parity")]
    assert len(parity) == 1
    junit = tmp_path / "junit.xml"
    code = main(["gate", str(suite["out"]), "--junit", str(junit)])
    assert code == (0 if summary["passed"] else 1)
    root = ET.fromstring(junit.read_text(encoding="utf-8").split("?>", 1)[1])
    names = [(c.get("classname"), c.get("name")) for c in root.iter("testcase")]
    assert len(names) == len(set(names))
    assert sum(1 for _, n in names if n and n.startswith("parity")) == 1
    assert any(n and n.endswith("on beir-tiny") for _, n in names)
    assert any(n and "pooled over pydocs, beir-tiny" in n for _, n in names)


@pytest.mark.slow
@pytest.mark.model
def test_old_results_are_redecided_with_their_historical_method(
        suite: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    manifest_path = suite["out"] / "manifest.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    capsys.readouterr()
    main(["gate", str(suite["out"])])
    assert f"interval method: {DEFAULT_METHOD}" in capsys.readouterr().out
    old = json.loads(json.dumps(manifest))
    for key in ("method", "min_nonzero"):
        del old["recipe"]["stats"][key]
    manifest_path.write_text(json.dumps(old), encoding="utf-8")
    try:
        main(["gate", str(suite["out"])])
        assert "interval method: percentile (min_nonzero 0)" in capsys.readouterr().out
        main(["gate", str(suite["out"]), "--method", "bca"])
        assert "interval method: bca (min_nonzero 10)" in capsys.readouterr().out
    finally:
        manifest_path.write_text(json.dumps(manifest), encoding="utf-8")


def test_decide_pooled_weighs_datasets_equally() -> None:
    rng = np.random.default_rng(0)
    big_ref = rng.uniform(0.2, 0.8, 2000)
    small_ref = rng.uniform(0.2, 0.8, 50)
    big = big_ref + rng.normal(0.0, 0.01, 2000)  # unchanged
    small = small_ref - 0.2 + rng.normal(0.0, 0.01, 50)  # broken
    spec = GateSpec(metric="nDCG@10", against="qrels", max_drop=0.05, over="pooled")
    check = decide_pooled(spec, [("big", big, big_ref), ("small", small, small_ref)])
    # pooled over all queries the drop would be ~0.005; the macro-average sees ~0.1
    assert check.verdict == "fail"
    assert check.figures["delta"] == pytest.approx(
        ((big - big_ref).mean() + (small - small_ref).mean()) / 2)


def test_pooled_needs_an_allowed_drop() -> None:
    from evalq.core.errors import InputError

    with pytest.raises(InputError, match="pooled applies to allowed-drop"):
        GateSpec(metric="overlap@10", against="reference", min=0.9, over="pooled")


@pytest.mark.slow
@pytest.mark.model
def test_calibration_reads_real_differences(suite: dict[str, Any]) -> None:
    from evalq.app.gate_command import stored_sections_of
    from evalq.execute.calibrate import results_populations

    populations = results_populations(suite["out"], stored_sections_of(suite["out"]))
    names = {p.name for p in populations}
    # every candidate x dataset x allowed-drop gate, with the margin that gate used
    assert "dyn-int8/pydocs/nDCG@10" in names and "fp32-again/beir-tiny/RR@10" in names
    ref = RunFolder(suite["out"]).read_per_query("pydocs", "fp32").values["nDCG@10"]
    pop = next(p for p in populations if p.name == "dyn-int8/pydocs/nDCG@10")
    assert pop.margin == pytest.approx(0.02 * ref.mean())


@pytest.mark.slow
@pytest.mark.model
def test_vs_reference_shows_the_interval_the_gate_used(suite: dict[str, Any]) -> None:
    metrics = suite["outcome"].summary["datasets"]["pydocs"]["variants"]["dyn-int8"]["metrics"]
    assert metrics["RR@10"]["vs_reference"]["confidence"] == 0.9  # the gate's own
    assert metrics["nDCG@10"]["vs_reference"]["confidence"] == 0.95  # the recipe's
    check = next(c for c in suite["outcome"].summary["datasets"]["pydocs"]["variants"]
                 ["dyn-int8"]["gate"]["checks"] if c["gate"].startswith("RR@10"))
    assert check["figures"]["ci_low"] == pytest.approx(metrics["RR@10"]["vs_reference"]["ci_low"])
