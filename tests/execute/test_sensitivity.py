"""``batch_sensitivity:`` end to end on a pydocs slice with the real MiniLM: a
batch-dependent candidate (torch dynamic int8) re-encoded under several compositions,
scored and gated under each; an invariant one (fp32 truncated to 128 tokens; bf16 would
be invariant too, but it is emulated and slow on these CPUs) left alone; the worst-composition
verdict; ``evalq gate`` reproducing it; recipe errors exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalq.core.errors import InputError
from evalq.core.gates import GateCheck, VariantGate
from evalq.core.values import PerQuery
from evalq.execute.sensitivity import apply_sensitivity, compositions
from evalq.plan.sensitivity import BatchSensitivity
from evalq.recipe.schema import load_recipe
from evalq.results.folder import RunFolder, RunSummary, clean_json
from support import recipes

SENSITIVITY = {"batch_tokens": [256, 2048], "shuffles": 1, "seed": 3, "max_queries": 30,
               "max_docs": 80}


def _recipe(folder: Path, **extra: Any) -> Path:
    """``extra``: keys added to the batch_sensitivity block."""
    return recipes.write(folder / "sens.yaml", recipes.recipe(
        "sens", cache=folder / "cache", queries=30, docs=90, batch_tokens=2048,
        candidates=[recipes.DYN_INT8, {"name": "fp32-128", "encoding": {"max_length": 128}}],
        gates=[recipes.gate("nDCG@10", "qrels", max_drop="1%"),
               recipes.gate("overlap@10", "reference", min=0.5)],
        resamples=1000, batch_sensitivity={**SENSITIVITY, **extra}))


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from evalq.app.api import run_recipe_file

    base = tmp_path_factory.mktemp("sens")
    outcome = run_recipe_file(_recipe(base), output=base / "out", progress=False)
    return {"outcome": outcome, "folder": base / "out", "base": base}


@pytest.mark.slow
@pytest.mark.model
def test_dependent_candidate_is_measured_under_every_composition(run):
    summary = run["outcome"].summary
    section = summary["datasets"]["pydocs"]["variants"]["dyn-int8"]["batch_sensitivity"]
    # 2048 is the run's own budget: as-run covers it, 256 and one shuffle are added.
    assert [c["id"] for c in section["compositions"]] == ["as-run", "tokens-256", "shuffle-3"]
    assert section["dependence"]["level"] == "dependent"
    assert section["slice"] == {"max_queries": 30, "max_docs": 80, "queries": 30,
                                "documents": 80}
    between = section["between_compositions"]
    assert between["texts"] == 110 and between["compositions"] == 3
    assert between["bit_identical"] is False
    # Real movement: per-tensor activation scales depend on the batch.
    assert between["cosine"]["min"] < 0.9999 and between["max_abs_diff"] > 1e-4
    assert between["cosine"]["min"] <= between["cosine"]["p1"] <= between["cosine"]["mean"]
    for row in section["compositions"]:
        assert set(row["verdicts"]) == {"nDCG@10 vs qrels max_drop 1%",
                                        "overlap@10 vs reference min 0.5"}
        assert "delta" in row["metrics"]["nDCG@10"]
    rng = section["metric_range"]["nDCG@10"]
    deltas = [row["metrics"]["nDCG@10"]["delta"] for row in section["compositions"]]
    assert rng["range"] == pytest.approx(max(deltas) - min(deltas))
    assert set(section["metric_range"]) == {"nDCG@10", "overlap@10"}
    assert section["extra_seconds"] > 0


@pytest.mark.slow
@pytest.mark.model
def test_invariant_candidate_is_not_measured(run):
    variants = run["outcome"].summary["datasets"]["pydocs"]["variants"]
    assert "batch_sensitivity" not in variants["fp32-128"]
    assert not (run["folder"] / "per_query" / "pydocs" / "batch-sensitivity" / "fp32-128").exists()


@pytest.mark.slow
@pytest.mark.model
def test_verdict_is_the_worst_composition_and_the_summary_says_so(run):
    summary = run["outcome"].summary
    entry = summary["datasets"]["pydocs"]["variants"]["dyn-int8"]
    section = entry["batch_sensitivity"]
    assert section["verdict_rule"] == "worst composition"
    expected = section["passed_as_run"] and all(r["passed"] for r in section["compositions"])
    assert summary["variants"]["dyn-int8"]["passed"] is expected
    assert section["failing_compositions"] == [r["id"] for r in section["compositions"]
                                               if r["verdict"] == "fail"]
    assert section["inconclusive_compositions"] == [
        r["id"] for r in section["compositions"] if r["verdict"] == "inconclusive"]
    assert all(r["passed"] is (r["verdict"] == "pass") for r in section["compositions"])
    assert any("dyn-int8 on pydocs is dependent on batch composition" in w
               and "worst composition" in w for w in summary["warnings"])
    labels = [c["gate"] for c in entry["gate"]["checks"]]
    assert any("[batch composition tokens-256 on 30 queries]" in g for g in labels)


@pytest.mark.slow
@pytest.mark.model
def test_stored_values_regate_to_the_same_verdicts(run, capsys):
    from evalq.app.gate_command import gate_command

    assert gate_command(run["folder"]) == run["outcome"].summary["passed"]
    out = capsys.readouterr().out
    assert "[batch composition shuffle-3" in out and "re-decided" not in out
    stored = run["folder"] / "per_query" / "pydocs" / "batch-sensitivity"
    assert sorted(p.name for p in (stored / "dyn-int8").iterdir()) == [
        "as-run.jsonl", "shuffle-3.jsonl", "tokens-256.jsonl"]
    # Only real variants sit at the top level, so readers listing variants see no extras.
    assert sorted(p.name for p in (run["folder"] / "per_query" / "pydocs").glob("*.jsonl")) \
        == ["dyn-int8.jsonl", "fp32-128.jsonl", "fp32.jsonl"]


@pytest.mark.slow
@pytest.mark.model
def test_rerun_reuses_every_composition_from_the_cache(run):
    from evalq.app.api import run_recipe_file

    again = run_recipe_file(_recipe(run["base"]), output=run["base"] / "again", progress=False)
    first = run["outcome"].summary["datasets"]["pydocs"]["variants"]["dyn-int8"]
    second = again.summary["datasets"]["pydocs"]["variants"]["dyn-int8"]
    manifest = json.loads((run["base"] / "again" / "manifest.json").read_text())
    sens = manifest["variants"]["dyn-int8"]["datasets"]["pydocs"]["batch_sensitivity"]
    assert all(c["computed_texts"] == 0 for c in sens["compositions"])
    assert [c["reused_from_run"] for c in sens["compositions"]] == [True, False, False]
    assert second["batch_sensitivity"]["metric_range"] == first["batch_sensitivity"][
        "metric_range"]


# ------------------------------------------------------------------------ units, no model

def _write(folder: RunFolder, name: str, ndcg: list[float]) -> None:
    folder.write_per_query("ds", name, PerQuery(tuple(f"q{i}" for i in range(len(ndcg))),
                                                {"nDCG@10": np.asarray(ndcg)}))


@pytest.mark.slow
@pytest.mark.model
def test_a_variant_that_keeps_the_index_reencodes_only_its_queries(tmp_path):
    """Int8 queries against fp32's documents (issue 31, keep your index): the queries are
    what a deployment encodes online, one request at a time, so their batch dependence is
    measured; the borrowed documents are fp32's under every composition."""
    from evalq.app.api import run_recipe_file
    from evalq.data.trec import read_run

    path = recipes.write(tmp_path / "keep.yaml", recipes.recipe(
        "keep-sens", cache=tmp_path / "cache", queries=30, docs=90, batch_tokens=2048,
        candidates=[{**recipes.DYN_INT8, "name": "q-int8", "documents": "reference"}],
        gates=[recipes.gate("nDCG@10", "qrels", max_drop="1%")], resamples=500,
        parity={"enabled": False}, batch_sensitivity=SENSITIVITY))
    outcome = run_recipe_file(path, output=tmp_path / "out", progress=False)
    section = outcome.summary["datasets"]["pydocs"]["variants"]["q-int8"]["batch_sensitivity"]
    assert [c["id"] for c in section["compositions"]] == ["as-run", "tokens-256", "shuffle-3"]
    between = section["between_compositions"]
    assert between["texts"] == 30 and between["compositions"] == 3  # the queries only
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text(encoding="utf-8"))
    rows = manifest["variants"]["q-int8"]["datasets"]["pydocs"]["batch_sensitivity"]
    assert [r["computed_texts"] for r in rows["compositions"]] == [0, 30, 30]
    runs = {r["id"]: read_run(tmp_path / "out" / "runs" / "pydocs" / f"{r['stored_as']}.trec")
            for r in rows["compositions"]}
    assert set(runs["as-run"]) == set(runs["tokens-256"]) == set(runs["shuffle-3"])
    assert len(runs["as-run"]) == 30
    assert section["passed_as_run"] in (True, False)  # decided, like any other candidate


def test_one_failing_composition_fails_the_candidate(tmp_path):
    from evalq.plan.gates import gate_spec

    recipe = load_recipe(_recipe(tmp_path))
    folder = RunFolder(tmp_path / "res")
    n = 500  # identical values certify a 1% margin only from ~430 queries (sparse-data rule)
    _write(folder, "batch-sensitivity/fp32/slice", [0.8] * n)
    _write(folder, "batch-sensitivity/c/as-run", [0.8] * n)
    _write(folder, "batch-sensitivity/c/tokens-256", [0.6] * n)  # a 25% drop
    specs = [gate_spec(recipe.gates[0], 0.95)]
    as_run = VariantGate(True, (GateCheck("nDCG@10 vs qrels max_drop 1%", True, "pass", "",
                                          {}),))
    entry = {"reference_stored_as": "batch-sensitivity/fp32/slice",
             "slice": {"queries": n, "documents": 100},
             "compositions": [
                 {"id": "as-run", "batch_tokens": 2048, "shuffle_seed": None,
                  "stored_as": "batch-sensitivity/c/as-run"},
                 {"id": "tokens-256", "batch_tokens": 256, "shuffle_seed": None,
                  "stored_as": "batch-sensitivity/c/tokens-256"}]}
    section, gate, note = apply_sensitivity(recipe.sections(), specs, as_run, entry, folder,
                                            "ds", "c")
    assert not gate.passed and section["passed_as_run"]
    assert section["failing_compositions"] == ["tokens-256"]
    assert section["metric_range"]["nDCG@10"]["range"] == pytest.approx(0.2)
    assert "fails under tokens-256" in note

    as_run_rule = load_recipe(_recipe(tmp_path, verdict="as-run"))
    section, gate, note = apply_sensitivity(as_run_rule.sections(), specs, as_run, entry,
                                            folder, "ds", "c")
    assert gate.passed and section["failing_compositions"] == ["tokens-256"]
    assert "as run only" in note


def test_a_slice_too_small_to_decide_is_inconclusive_not_failed(tmp_path, capsys):
    """30 identical queries cannot certify a 1% margin (sparse-data rule): that composition
    is inconclusive, the candidate does not pass, and nothing calls it a failure."""
    from evalq.plan.gates import gate_spec
    from evalq.report.sensitivity import sensitivity_text

    recipe = load_recipe(_recipe(tmp_path))
    folder = RunFolder(tmp_path / "res")
    _write(folder, "batch-sensitivity/fp32/slice", [0.8] * 30)
    _write(folder, "batch-sensitivity/c/as-run", [0.8] * 30)
    specs = [gate_spec(recipe.gates[0], 0.95)]
    as_run = VariantGate(True, (GateCheck("nDCG@10 vs qrels max_drop 1%", True, "pass", "",
                                          {}),))
    entry = {"reference_stored_as": "batch-sensitivity/fp32/slice",
             "slice": {"queries": 30, "documents": 60},
             "compositions": [{"id": "as-run", "batch_tokens": 2048, "shuffle_seed": None,
                               "stored_as": "batch-sensitivity/c/as-run"}]}
    section, gate, note = apply_sensitivity(recipe.sections(), specs, as_run, entry, folder,
                                            "ds", "c")
    assert not gate.passed
    assert section["failing_compositions"] == []
    assert section["inconclusive_compositions"] == ["as-run"]
    assert section["compositions"][0]["verdict"] == "inconclusive"
    assert "inconclusive under as-run" in note and "fails" not in note
    stored = {**section,
              "dependence": {"level": "dependent", "reason": "", "tolerance": None,
                             "batch_dependent": True},
              "slice": {"max_queries": 30, "max_docs": 60, **section["slice"]},
              "between_compositions": {"texts": 90, "compositions": 1, "cosine": None,
                                       "max_abs_diff": None, "bit_identical": None}}
    out = sensitivity_text(RunSummary.model_validate(clean_json({
        "schema_version": 1, "recipe": "r", "reference": "fp32", "passed": False,
        "variants": {}, "datasets": {"ds": {"queries": 30, "variants": {"c": {
            "role": "candidate", "metrics": {}, "batch_sensitivity": stored}}}}})))
    assert "as-run  inconclusive" in out and "FAIL" not in out


def test_compositions_skip_the_run_budget_and_seed_the_shuffles():
    opts = BatchSensitivity(batch_tokens=[512, 2048, 8192], shuffles=2, seed=5)
    assert [(c.id, c.batch_tokens, c.shuffle_seed) for c in compositions(opts, 2048)] == [
        ("as-run", 2048, None), ("tokens-512", 512, None), ("tokens-8192", 8192, None),
        ("shuffle-5", 2048, 5), ("shuffle-6", 2048, 6)]


@pytest.mark.parametrize(("extra", "field", "words"), [
    ({"variants": ["nope"]}, "batch_sensitivity.variants.0", "'nope', which is not a candidate"),
    ({"shufles": 2}, "batch_sensitivity.shufles", "Did you mean 'shuffles'"),
    ({"verdict": "best"}, "batch_sensitivity.verdict", "worst"),
], ids=["variants", "shufles", "verdict"])
def test_bad_block_is_exit_2_naming_the_field(tmp_path, extra, field, words):
    with pytest.raises(InputError) as caught:
        load_recipe(_recipe(tmp_path, **extra))
    assert caught.value.field == field and words in str(caught.value)


def test_budget_below_16_is_refused(tmp_path):
    path = _recipe(tmp_path, batch_tokens=[8, 2048])
    with pytest.raises(InputError) as caught:
        load_recipe(path)
    assert "at least 16" in str(caught.value) and caught.value.line is not None
