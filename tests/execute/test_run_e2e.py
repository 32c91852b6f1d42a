"""`evalq run` end to end on a pydocs slice with the real MiniLM, FAISS and quantization.

One module-scoped run feeds most assertions (CI budget); a second run of the same recipe
must re-encode nothing and reproduce every metric; an interrupted run must resume from
its finished cache chunks and end with identical metrics.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalq.app.api import run_recipe_file
from evalq.app.cli import main
from evalq.engines.inprocess import InProcessEncoder
from evalq.execute.evaluate import RunOutcome
from support import recipes

pytestmark = [pytest.mark.slow, pytest.mark.model]

RECIPE = recipes.recipe(
    "e2e", queries=40, docs=200, cache_chunk=64,
    batch_tokens=2048,  # pinned: the interruption test counts batches
    candidates=[recipes.DYN_INT8, recipes.INT8_VECTORS, recipes.BINARY_PLAIN,
                {"name": "binary-rescored", "vectors": {"quantize": "binary", "rescore": 10}}],
    metrics=["nDCG@10", "R@100", "RR@10"],
    reference_metrics=["overlap@10", "refnDCG@10", "RBO@100", "cosine"],
    gates=[recipes.gate("nDCG@10", "qrels", max_drop="1%"),
           recipes.gate("overlap@10", "reference", min=0.9)],
    resamples=2000)


class _Counter:
    """Counts forward passes of every in-process encoder (wraps the real ``embed``)."""

    def __init__(self, fail_after: int | None = None) -> None:
        self.calls = 0
        self.fail_after = fail_after
        self._real = InProcessEncoder.embed

    def __enter__(self) -> _Counter:
        counter = self

        def embed(encoder: InProcessEncoder, texts: Any) -> np.ndarray:
            if counter.fail_after is not None and counter.calls >= counter.fail_after:
                raise KeyboardInterrupt  # what Ctrl-C looks like mid-run
            counter.calls += 1
            return counter._real(encoder, texts)

        InProcessEncoder.embed = embed  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        InProcessEncoder.embed = self._real  # type: ignore[method-assign]


def _write_recipe(folder: Path, cache: Path) -> Path:
    return recipes.write(folder / "e2e.yaml", {**RECIPE, "cache_dir": str(cache)})


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("e2e")
    recipe = _write_recipe(base, base / "cache")
    with _Counter() as first_count:
        first = run_recipe_file(recipe, output=base / "first", progress=False)
    with _Counter() as second_count:
        second = run_recipe_file(recipe, output=base / "second", progress=False)
    return {"recipe": recipe, "base": base, "first": first, "second": second,
            "first_calls": first_count.calls, "second_calls": second_count.calls}


def _variant(outcome: RunOutcome, name: str) -> dict[str, Any]:
    return outcome.summary["datasets"]["pydocs"]["variants"][name]


def _metric_values(summary: dict[str, Any]) -> dict[str, Any]:
    """Every metric and reference-metric figure, without timings."""
    out = {}
    for ds, entry in summary["datasets"].items():
        for name, v in entry["variants"].items():
            out[(ds, name)] = (v["metrics"], v.get("reference_metrics"), v.get("gate"))
    return out


def test_run_writes_the_documented_folder(runs: dict[str, Any]) -> None:
    out: Path = runs["first"].output
    manifest = json.loads((out / "manifest.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    assert manifest["schema_version"] == summary["schema_version"] == 1
    assert manifest["status"] == "finished"
    assert manifest["datasets"]["pydocs"]["fingerprint"].startswith("sha256:")
    assert manifest["model"]["fingerprint"]
    assert manifest["versions"]["torch"] and manifest["recipe"]["name"] == "e2e"
    assert manifest["variants"]["fp32"]["settings"]["pooling"] == "mean"
    for name in ("fp32", "dyn-int8", "int8-vectors", "binary-plain", "binary-rescored"):
        assert (out / "runs" / "pydocs" / f"{name}.trec").is_file()
        lines = (out / "per_query" / "pydocs" / f"{name}.jsonl").read_text().splitlines()
        assert len(lines) == summary["datasets"]["pydocs"]["queries"]
    entry = _variant(runs["first"], "dyn-int8")["metrics"]["nDCG@10"]
    assert set(entry["vs_reference"]) >= {"delta", "ci_low", "ci_high", "p_value"}
    assert entry["vs_reference"]["ci_low"] <= entry["vs_reference"]["delta"] <= \
        entry["vs_reference"]["ci_high"]


def test_run_file_agrees_with_pytrec_eval(runs: dict[str, Any]) -> None:
    """The stored TREC run, scored by trec_eval's implementation, gives our summary value."""
    import pytrec_eval

    from evalq.data.manifest import load_dataset
    from evalq.data.trec import read_run

    ds = load_dataset({"name": "pydocs", "source": "pydocs"}, max_queries=40, max_docs=200)
    run = read_run(runs["first"].output / "runs" / "pydocs" / "fp32.trec")
    qrels = {q: dict(d) for q, d in ds.qrels.judgments.items()}
    scores = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    expected = np.mean([scores[q]["ndcg_cut_10"] if q in scores else 0.0 for q in qrels])
    got = _variant(runs["first"], "fp32")["metrics"]["nDCG@10"]["value"]
    assert abs(got - expected) < 1e-9


def test_dynamic_int8_is_measurably_worse_and_fails(runs: dict[str, Any]) -> None:
    dyn = _variant(runs["first"], "dyn-int8")
    assert dyn["vectors"]["query"]["mean"] < 0.99  # bnb int8 stays >= 0.99 (test_quantize)
    assert dyn["reference_metrics"]["overlap@10"]["value"] < 0.9
    assert not dyn["gate"]["passed"]
    assert runs["first"].passed is False
    assert "dyn-int8" in " ".join(runs["first"].summary["failed_gates"])


def test_vector_quantization_with_and_without_rescoring(runs: dict[str, Any]) -> None:
    overlap = {name: _variant(runs["first"], name)["reference_metrics"]["overlap@10"]["value"]
               for name in ("int8-vectors", "binary-plain", "binary-rescored")}
    assert overlap["int8-vectors"] >= 0.95
    assert overlap["binary-plain"] < overlap["binary-rescored"] - 0.05
    assert overlap["binary-plain"] < overlap["int8-vectors"]
    index_bytes = {n: _variant(runs["first"], n)["index"]["bytes"]
                   for n in ("fp32", "int8-vectors", "binary-plain")}
    assert index_bytes["fp32"] == 4 * index_bytes["int8-vectors"]
    assert index_bytes["int8-vectors"] == 8 * index_bytes["binary-plain"]


def test_second_run_reencodes_nothing_and_reproduces_every_value(runs: dict[str, Any]) -> None:
    assert runs["first_calls"] > 0
    assert runs["second_calls"] == 0
    manifest = json.loads((runs["second"].output / "manifest.json").read_text())
    for variant in manifest["variants"].values():
        for role in ("documents", "queries"):
            assert variant["datasets"]["pydocs"]["encode"][role]["chunks_computed"] == 0
    assert _metric_values(runs["first"].summary) == _metric_values(runs["second"].summary)


def test_regate_reproduces_the_verdicts_and_writes_junit(runs: dict[str, Any],
                                                         tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    junit = tmp_path / "junit.xml"
    code = main(["gate", str(runs["first"].output), "--junit", str(junit)])
    assert code == 1  # dyn-int8 fails its gates
    suite = ET.parse(junit).getroot()
    failures = sum(int(s.get("failures", 0)) for s in suite.iter("testsuite"))
    expected = sum(1 for v in runs["first"].summary["datasets"]["pydocs"]["variants"].values()
                   for c in (v.get("gate") or {}).get("checks", []) if not c["passed"])
    assert failures == expected > 0


def test_interrupted_run_resumes_from_finished_chunks(runs: dict[str, Any],
                                                      tmp_path: Path) -> None:
    recipe = _write_recipe(tmp_path, tmp_path / "cache")
    out = tmp_path / "out"
    with _Counter(fail_after=12) as counter, pytest.raises(KeyboardInterrupt):
        run_recipe_file(recipe, output=out, only=["dyn-int8"], progress=False)
    assert counter.calls == 12
    assert not (out / "summary.json").exists()  # an unfinished run never looks finished
    assert json.loads((out / "manifest.json").read_text())["status"] == "interrupted"
    with _Counter() as resumed:
        outcome = run_recipe_file(recipe, output=out, only=["dyn-int8"], progress=False)
    manifest = json.loads((out / "manifest.json").read_text())
    docs = manifest["variants"]["fp32"]["datasets"]["pydocs"]["encode"]["documents"]
    assert docs["chunks_cached"] >= 1 and docs["chunks_computed"] >= 1
    assert resumed.calls < runs["first_calls"]
    for name in ("fp32", "dyn-int8"):
        assert _variant(outcome, name)["metrics"] == _variant(runs["first"], name)["metrics"]
