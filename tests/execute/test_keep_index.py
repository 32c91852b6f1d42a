"""Keep your index (issue 31), end to end with the real MiniLM on a pydocs slice: borrowed
sides (another variant's, or a file's documents and queries) are never encoded (engines
and texts counted), scores are the hand-computed inner products of the vectors each side
came from, and a vector file that drifted from today's stack stops the run with exit 2
before it is trusted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalq.app.api import run_recipe_file
from evalq.core.errors import InputError
from evalq.data.manifest import load_dataset
from evalq.data.trec import read_run
from evalq.encode.matryoshka import truncate
from evalq.engines.inprocess import InProcessEncoder
from evalq.execute import evaluate
from evalq.recipe.plan import plan_file
from evalq.report.markdown import run_summary_markdown
from evalq.report.page import render_run
from evalq.report.runview import RunView
from evalq.retrieve.vectorquant import VectorSpec, quantize_documents
from support import recipes
from support.hand_search import hand_ranking

pytestmark = [pytest.mark.slow, pytest.mark.model]

QUERIES, DOCS = 40, 120
FILE = {"path": "vec.npy", "ids": "ids.txt"}
QUERY_FILE = {"path": "qvec.npy", "ids": "qids.txt"}
BINARY_FLOAT_QUERIES = {"quantize": "binary", "queries": "float"}
CANDIDATES = [
    {"name": "q-int8", "quantization": {"method": "torch-dynamic-int8"},
     "documents": "reference"},
    {"name": "bin-docs", "documents": "reference", "queries": "reference",
     "vectors": BINARY_FLOAT_QUERIES},
    {"name": "fp32-again", "documents": "reference", "queries": "reference"},
    {"name": "disk", "documents": FILE, "queries": "reference"},
    {"name": "disk-bin", "documents": FILE, "queries": "fp32", "vectors": BINARY_FLOAT_QUERIES},
    {"name": "disk-both", "documents": FILE, "queries": QUERY_FILE},
    # the borrower's vectors.dims truncates both sides, a lender variant's and a file's
    {"name": "short", "documents": "reference", "queries": "reference",
     "vectors": {"dims": 128}},
    {"name": "disk-short", "documents": FILE, "queries": "reference",
     "vectors": {"dims": 128}},
]


class _Counts:
    """Engines built and texts embedded by every in-process encoder during a run."""

    def __enter__(self) -> _Counts:
        self.engines, self.texts = 0, 0
        self._embed, self._create = InProcessEncoder.embed, evaluate.create_encoder
        counts = self

        def embed(encoder: InProcessEncoder, texts: Any) -> np.ndarray:
            counts.texts += len(texts)
            return counts._embed(encoder, texts)

        def create(*args: Any, **kwargs: Any) -> Any:
            counts.engines += 1
            return counts._create(*args, **kwargs)

        InProcessEncoder.embed = embed  # type: ignore[method-assign]
        evaluate.create_encoder = create  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        InProcessEncoder.embed = self._embed  # type: ignore[method-assign]
        evaluate.create_encoder = self._create  # type: ignore[assignment]


def _dataset() -> Any:
    return load_dataset(recipes.PYDOCS, max_queries=QUERIES, max_docs=DOCS)


def _recipe(base: Path, candidates: list[dict[str, Any]], output: str) -> Path:
    data = recipes.recipe("keep", cache=base / "cache", output=base / output,
                          queries=QUERIES, docs=DOCS, candidates=candidates,
                          gates=[recipes.gate("nDCG@10", "qrels", max_drop="2%")],
                          resamples=500, parity={"enabled": False})
    return recipes.write(base / f"{output}.yaml", data)


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("keep")
    plan = plan_file(_recipe(base, CANDIDATES[:2], "settings"))  # the reference's settings
    ds = _dataset()
    encoder = InProcessEncoder(plan.reference.model_folder(),
                               settings=plan.reference.encoding_settings())
    try:  # the "index on disk": today's fp32 vectors of the corpus, in another row order
        docs = encoder.embed(ds.corpus.texts_for_encoding(" "))
        queries = encoder.embed(list(ds.queries.texts))
    finally:
        encoder.close()
    for file, ids, vectors in ((FILE, ds.corpus.ids, docs), (QUERY_FILE, ds.queries.ids,
                                                            queries)):
        order = np.random.default_rng(1).permutation(len(ids))
        np.save(base / file["path"], vectors[order])
        (base / file["ids"]).write_text("\n".join(ids[i] for i in order) + "\n")
    with _Counts() as counts:
        outcome = run_recipe_file(_recipe(base, CANDIDATES, "out"), progress=False)
    return {"base": base, "outcome": outcome, "counts": counts, "docs": docs,
            "queries": queries, "ds": ds}


def _entry(kept: dict[str, Any], name: str) -> dict[str, Any]:
    return kept["outcome"].summary["datasets"]["pydocs"]["variants"][name]


def test_borrowed_sides_are_never_encoded(kept: dict[str, Any]) -> None:
    counts = kept["counts"]
    # fp32 and q-int8 build engines; the seven that borrow both sides build none.
    assert counts.engines == 2
    # fp32 encodes its documents and queries; q-int8 only its queries.
    assert counts.texts == DOCS + QUERIES + QUERIES
    q_int8 = _entry(kept, "q-int8")["encode"]
    assert q_int8["reused"] == {"documents": "variant fp32"}
    assert q_int8.get("documents") is None and q_int8["queries"]["texts"] == QUERIES
    assert _entry(kept, "bin-docs")["encode"]["reused"] == {
        "documents": "variant fp32", "queries": "variant fp32"}
    assert _entry(kept, "disk")["encode"]["reused"]["documents"] == "file vec.npy"
    assert _entry(kept, "disk-both")["encode"]["reused"] == {
        "documents": "file vec.npy", "queries": "file qvec.npy"}


def _run(kept: dict[str, Any], name: str) -> dict[str, dict[str, float]]:
    return read_run(kept["outcome"].output / "runs" / "pydocs" / f"{name}.trec")


def _assert_ranked_by(run: dict[str, dict[str, float]], queries: np.ndarray,
                      docs: np.ndarray, ds: Any) -> None:
    """The run's documents and scores are the hand-computed top 10 of ``queries · docs``
    (scores within float tolerance; a swap only where two hand scores nearly tie)."""
    ids = list(ds.corpus.ids)
    hand = hand_ranking(queries, docs, list(ds.queries.ids), ids, 10)
    scores = queries.astype(np.float64) @ docs.astype(np.float64).T
    for qi, qid in enumerate(ds.queries.ids):
        got = list(run[qid])[:10]
        for doc in got:
            assert run[qid][doc] == pytest.approx(scores[qi, ids.index(doc)], abs=1e-4)
        if got != hand[qid]:  # only near-ties may reorder (vectors differ in the 7th digit)
            tenth = sorted(scores[qi], reverse=True)
            assert all(abs(scores[qi, ids.index(d)] - tenth[9]) < 1e-4
                       for d in set(got) ^ set(hand[qid]))


def test_borrowing_both_sides_of_the_reference_reproduces_its_run_exactly(
        kept: dict[str, Any]) -> None:
    """The reference's own vectors, not a re-encoding: every score identical."""
    assert _run(kept, "fp32-again") == _run(kept, "fp32")


@pytest.mark.parametrize("name", ["disk", "disk-both"])
def test_the_file_variant_ranks_by_the_files_vectors(kept: dict[str, Any], name: str) -> None:
    """Documents from a file (and queries from another, read by query id in another row
    order): the hand-computed ranking of today's vectors."""
    ds = kept["ds"]
    _assert_ranked_by(_run(kept, name), kept["queries"], kept["docs"], ds)


@pytest.mark.parametrize("name", ["short", "disk-short"])
def test_vectors_dims_truncates_both_borrowed_sides(kept: dict[str, Any], name: str) -> None:
    """`vectors.dims: 128` on a variant whose documents come from the reference or from a
    file (issue 32): both sides are the first 128 coordinates, renormalized."""
    ds = kept["ds"]
    _assert_ranked_by(_run(kept, name), truncate(kept["queries"], 128),
                      truncate(kept["docs"], 128), ds)
    assert _entry(kept, name)["index"]["dim"] == 128


def test_binary_documents_with_float_queries_rank_by_hand(kept: dict[str, Any]) -> None:
    ds = kept["ds"]
    stored = quantize_documents(kept["docs"], VectorSpec(quantize="binary", queries="float"))
    signs = stored.stored_vectors(np.arange(len(ds.corpus.ids)))
    _assert_ranked_by(_run(kept, "disk-bin"), kept["queries"], signs, ds)


def test_ndcg_agrees_with_pytrec_eval(kept: dict[str, Any]) -> None:
    import pytrec_eval

    qrels = {q: dict(d) for q, d in kept["ds"].qrels.judgments.items()}
    for name in ("q-int8", "bin-docs", "disk", "disk-both"):
        scores = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(
            _run(kept, name))
        expected = np.mean([scores[q]["ndcg_cut_10"] if q in scores else 0.0 for q in qrels])
        assert _entry(kept, name)["metrics"]["nDCG@10"]["value"] == pytest.approx(
            expected, abs=1e-9)


def test_the_probe_is_in_the_summary(kept: dict[str, Any]) -> None:
    probe = _entry(kept, "disk")["encode"]["probe"]
    assert probe["passed"] and probe["texts"] == 16 and probe["rows"] == DOCS
    assert probe["lowest_cosine"] >= 0.999 and probe["file"] == "vec.npy"
    queries = _entry(kept, "disk-both")["encode"]["query_probe"]
    assert queries["passed"] and queries["side"] == "queries" and queries["rows"] == QUERIES
    assert queries["lowest_cosine"] >= 0.999 and queries["file"] == "qvec.npy"
    # the report says what was reused and that the file matched, in every format
    run = RunView.load(kept["outcome"].output)
    for text in (run_summary_markdown(run), render_run(run)):
        assert "q-int8 on pydocs: documents reused from variant fp32 (not encoded)" in text
        for file in ("vec.npy", "qvec.npy"):
            assert f"the vectors in {file} match today&#39;s stack at cosine ≥ 0.999" in text \
                or f"the vectors in {file} match today's stack at cosine ≥ 0.999" in text
        assert "queries reused from file qvec.npy (not encoded)" in text
    # the same documents searched against the same queries: the reference's verdicts
    assert _entry(kept, "disk")["metrics"]["nDCG@10"]["value"] == pytest.approx(
        _entry(kept, "fp32")["metrics"]["nDCG@10"]["value"], abs=1e-6)


@pytest.mark.parametrize(("side", "file", "other"), [
    ("documents", FILE, "queries"), ("queries", QUERY_FILE, "documents")])
def test_a_drifted_vector_file_stops_the_run_with_exit_2(
        kept: dict[str, Any], side: str, file: dict[str, str], other: str) -> None:
    """Rows of another direction (still unit length, so the plan's norm check passes
    them): the probe against the reference's vectors of the same texts refuses them."""
    base = kept["base"]
    rng = np.random.default_rng(7)
    stored = np.load(base / file["path"])
    drifted = stored + rng.normal(scale=0.02, size=stored.shape)
    drifted /= np.linalg.norm(drifted, axis=1, keepdims=True)
    np.save(base / f"drift-{side}.npy", drifted.astype(np.float32))
    recipe = _recipe(base, [{"name": "disk", other: "reference", side: {
        "path": f"drift-{side}.npy", "ids": file["ids"]}}], f"drift-{side}")
    with pytest.raises(InputError) as caught:
        run_recipe_file(recipe, progress=False)
    text = str(caught.value)
    assert f"drift-{side}.npy" in text and "lowest cosine 0.9" in text and "< 0.999" in text
    assert f"candidates.0.{side}.probe" in text and "re-embed the" in text
    assert f"sampled {side}" in text


def test_the_shipped_recipe_certifies_int8_queries_and_rejects_binary_docs(
        tmp_path: Path) -> None:
    """recipes/keep-index.yaml as shipped (only its cache and output moved): the OpenVINO
    int8 model encodes the queries only and is certified against the fp32 index; binary
    documents with fp32 queries build no engine and are rejected (top-10 overlap)."""
    import yaml

    shipped = Path(__file__).resolve().parents[2] / "recipes" / "keep-index.yaml"
    data = yaml.safe_load(shipped.read_text(encoding="utf-8"))
    data.update(cache_dir=str(tmp_path / "cache"), output=str(tmp_path / "out"))
    with _Counts() as counts:
        outcome = run_recipe_file(recipes.write(tmp_path / "keep-index.yaml", data),
                                  progress=False)
    assert counts.engines == 2  # fp32 and the OpenVINO int8 model; binary-docs none
    variants = outcome.summary["datasets"]["pydocs"]["variants"]
    ov = variants["ov-int8-queries"]
    assert ov["encode"]["reused"] == {"documents": "variant fp32"}
    assert ov["encode"]["queries"]["texts"] == data["max_queries"]
    assert variants["binary-docs"]["index"]["queries"] == "float"
    verdicts = {n: v["verdict"] for n, v in outcome.summary["variants"].items()
                if v["role"] == "candidate"}
    assert verdicts == {"ov-int8-queries": "pass", "binary-docs": "fail"}
