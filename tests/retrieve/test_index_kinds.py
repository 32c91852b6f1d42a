"""The retrieval kinds' registry and the index protocol, with a stand-in kind.

The stand-in (``numpy-brute``: a brute-force numpy search) is registered in this module
only; a recipe naming it runs end to end, and its rankings must be exact FAISS's (the
variant's ``.exact`` run, searched by the ``exact`` kind over the same vectors).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from pydantic import Field

from evalq.app.api import run_recipe_file
from evalq.app.cli import main
from evalq.core.errors import InputError
from evalq.core.ranking import Ranking
from evalq.recipe.schema import load_recipe
from evalq.retrieve.ann import FaissOptions
from evalq.retrieve.exact import ExactOptions
from evalq.retrieve.kinds import (
    Documents,
    Index,
    IndexProof,
    IndexStats,
    KindOptions,
    KindSpec,
    Queries,
)
from evalq.retrieve.registry import INDEX_KINDS
from evalq.retrieve.search import id_ranks, order_topk
from support import recipes

STAND_IN = "numpy-brute"


class BruteOptions(KindOptions):
    kind: Literal["numpy-brute"] = "numpy-brute"
    block: int = Field(default=64, ge=1)  # queries scored per matrix product


class BruteIndex:
    """Every document scored against every query with numpy, in trec_eval's order."""

    def __init__(self, options: BruteOptions) -> None:
        self.options = options
        self.ids: tuple[str, ...] = ()
        self.vectors = np.zeros((0, 0), dtype=np.float32)
        self.closed = False

    def add(self, docs: Documents) -> None:
        assert docs.vectors is not None
        more = np.asarray(docs.vectors, dtype=np.float32)
        self.vectors = more if not self.ids else np.concatenate([self.vectors, more])
        self.ids = (*self.ids, *docs.ids)

    def search(self, queries: Queries, depth: int, params: Any = None) -> Ranking:
        assert queries.vectors is not None
        k = min(depth, len(self.ids))
        tie_key = id_ranks(self.ids)
        indices = np.full((len(queries.ids), depth), -1, dtype=np.int64)
        scores = np.full((len(queries.ids), depth), np.nan)
        everyone = np.arange(len(self.ids), dtype=np.int64)
        for start in range(0, len(queries.ids), self.options.block):
            block = np.asarray(queries.vectors[start:start + self.options.block], np.float32)
            sc = block @ self.vectors.T
            idx = np.broadcast_to(everyone, sc.shape)
            top_sc, top_idx = order_topk(sc, idx, k, tie_key)
            indices[start:start + len(block), :k] = top_idx
            scores[start:start + len(block), :k] = top_sc
        return Ranking.from_search(queries.ids, self.ids, indices, scores)

    def stats(self) -> IndexStats:
        return IndexStats(bytes=int(self.vectors.nbytes), build_s=0.0, documents=len(self.ids))

    def proof(self) -> IndexProof:
        return IndexProof(kind=STAND_IN, exact=True, method="numpy matmul",
                          params={"block": self.options.block, "ntotal": len(self.ids)})

    def close(self) -> None:
        self.closed = True


def _build(options: BruteOptions, docs: Documents, where: str) -> Index:
    index = BruteIndex(options)
    index.add(docs)
    return index


SPEC = KindSpec(name=STAND_IN, summary="brute-force numpy search (a test's stand-in)",
                inputs="vectors", options=BruteOptions, build=_build, exhaustive=True)


@pytest.fixture
def stand_in() -> Iterator[KindSpec]:
    with INDEX_KINDS.added(SPEC) as spec:
        yield spec


def test_the_registry_refuses_a_second_kind_of_one_name(stand_in: KindSpec) -> None:
    with pytest.raises(ValueError, match="already registered"):
        INDEX_KINDS.register(stand_in)
    with pytest.raises(ValueError, match="already registered"):
        INDEX_KINDS.register(KindSpec(name="faiss", summary="", inputs="vectors",
                                      options=FaissOptions, build=_build))
    assert INDEX_KINDS.names("vectors") == ("exact", "faiss", "pgvector", "qdrant", STAND_IN)
    assert INDEX_KINDS.names("texts") == ("bm25",)


def test_a_kind_whose_options_claim_another_name_is_refused() -> None:
    with pytest.raises(ValueError, match="must default 'kind' to 'other'"):
        INDEX_KINDS.register(KindSpec(name="other", summary="", inputs="vectors",
                                      options=BruteOptions, build=_build))
    assert "other" not in INDEX_KINDS.names()


def _recipe(cache: Path, index: dict[str, Any]) -> dict[str, Any]:
    return recipes.recipe(
        "kinds", cache=cache, queries=12, docs=40,
        candidates=[{"name": "fp32-brute", "index": index}],
        metrics=["nDCG@10"], reference_metrics=["overlap@10"],
        gates=[recipes.gate("nDCG@10", "qrels", max_drop="5%")], resamples=200)


def test_index_parses_through_the_registry(stand_in: KindSpec, tmp_path: Path) -> None:
    def index_of(index: Any) -> Any:
        return load_recipe(_recipe(tmp_path, index)).candidates[0].index

    assert index_of({"kind": STAND_IN, "block": 8}) == BruteOptions(block=8)
    assert index_of({"factory": "HNSW16"}) == FaissOptions(factory="HNSW16")  # no kind: faiss
    assert index_of({"kind": "exact"}) == ExactOptions()
    for bad, field, needle in (
            ({"kind": STAND_IN, "blok": 8}, "candidates.0.index.blok", "Did you mean 'block'"),
            ({"kind": STAND_IN, "block": 0}, "candidates.0.index.block", "greater than"),
            ({"kind": "bm25"}, "candidates.0.index", "indexes texts"),
            ({"kind": "annoy"}, "candidates.0.index", f"qdrant, {STAND_IN}")):
        with pytest.raises(InputError) as err:
            index_of(bad)
        assert err.value.field == field and needle in str(err.value), str(err.value)


def test_the_stand_in_is_refused_once_unregistered(tmp_path: Path) -> None:
    assert STAND_IN not in INDEX_KINDS.names()
    path = recipes.write(tmp_path / "r.yaml", _recipe(tmp_path, {"kind": STAND_IN}))
    assert main(["validate", str(path)]) == 2


def _runs(path: Path) -> dict[str, list[tuple[str, float]]]:
    """A run file's rows per query, in file order."""
    out: dict[str, list[tuple[str, float]]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        qid, _, doc, _, score, _ = line.split()
        out.setdefault(qid, []).append((doc, float(score)))
    return out


def _same_ranking(a: list[tuple[str, float]], b: list[tuple[str, float]]) -> bool:
    """Same documents in the same order; two documents may swap only where their scores
    agree to float32 rounding (numpy's and FAISS's kernels round differently)."""
    if len(a) != len(b):
        return False
    return all(x[0] == y[0] or abs(x[1] - y[1]) <= 1e-5 for x, y in zip(a, b, strict=True))


@pytest.mark.slow
@pytest.mark.model
def test_a_recipe_runs_through_a_registered_stand_in_kind(stand_in: KindSpec,
                                                         tmp_path: Path) -> None:
    recipe = recipes.write(tmp_path / "kinds.yaml",
                           _recipe(tmp_path / "cache", {"kind": STAND_IN, "block": 5}))
    outcome = run_recipe_file(recipe, output=tmp_path / "out", progress=False)
    runs = tmp_path / "out" / "runs" / "pydocs"
    brute, exact = _runs(runs / "fp32-brute.trec"), _runs(runs / "fp32-brute.exact.trec")
    assert brute.keys() == exact.keys() and len(brute) == 12
    for qid in exact:
        assert _same_ranking(brute[qid], exact[qid]), qid

    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    index = manifest["variants"]["fp32-brute"]["datasets"]["pydocs"]["index"]
    assert index["kind"] == STAND_IN and index["block"] == 5
    assert index["proof"] == {"kind": STAND_IN, "exact": True, "method": "numpy matmul",
                              "params": {"block": 5, "ntotal": 40}}
    assert index["recall@10"] == 1.0 and index["bytes"] == 40 * 384 * 4
    assert index["loss"]["nDCG@10"]["index_loss"] == pytest.approx(0.0, abs=1e-12)
    # the reference searched exactly, and says so
    ref_index = manifest["variants"]["fp32"]["datasets"]["pydocs"]["index"]
    assert ref_index["proof"]["exact"] and ref_index["proof"]["method"] == "IndexFlatIP"
    judged = outcome.summary["datasets"]["pydocs"]["variants"]["fp32-brute"]
    assert judged["metrics"]["nDCG@10"]["value"] == pytest.approx(
        index["loss"]["nDCG@10"]["ann"])
    # the three losses (issue 30): the same vectors searched the same way lose nothing
    per_query = tmp_path / "out" / "per_query" / "pydocs"
    assert (per_query / "fp32-brute.exact.jsonl").is_file()
    assert (per_query / "fp32-brute.index.jsonl").is_file()
    for measure in ("nDCG@10", "overlap@10"):
        split = judged["losses"][measure]
        for loss in ("model", "index", "end_to_end"):
            assert split[loss] == pytest.approx(0.0, abs=1e-6), (measure, loss)


def _scattered(n_docs: int = 400, dim: int = 16) -> tuple[Documents, Queries]:
    """Vectors with no cluster structure: an IVF list probed alone misses neighbours."""
    rng = np.random.default_rng(0)
    docs = rng.standard_normal((n_docs, dim))
    queries = rng.standard_normal((20, dim))
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    return (Documents(tuple(f"d{i}" for i in range(n_docs)), docs.astype(np.float32)),
            Queries(tuple(f"q{i}" for i in range(20)), queries.astype(np.float32)))


def test_one_faiss_build_serves_a_sweep_and_proves_each_setting() -> None:
    """The protocol's search options: one HNSW build searched at two efSearch values; the
    proof reads back what FAISS holds, not what the recipe asked for."""
    docs, queries = _scattered()
    exact = INDEX_KINDS.build(ExactOptions(), docs, where="index")
    truth = exact.search(queries, 10)
    assert exact.proof().exact and exact.proof().method == "IndexFlatIP"
    index = INDEX_KINDS.build(FaissOptions(factory="IVF8,Flat", train_size=400), docs,
                              where="index")
    spec = INDEX_KINDS.get("faiss")
    assert spec.search_options is not None
    recalls = []
    for nprobe in (1, 8):
        ranking = index.search(queries, 10, spec.search_options(nprobe=nprobe))
        proof = index.proof()
        assert proof.params["nprobe"] == nprobe and proof.params["nlist"] == 8
        assert proof.method == "IndexIVFFlat" and not proof.exact
        recalls.append(float((ranking.indices[:, :, None] == truth.indices[:, None, :])
                             .any(axis=2).mean()))
    assert recalls[1] == 1.0 > recalls[0]  # all 8 lists probed: exhaustive; 1 list: not
    stats = index.stats()
    assert stats.documents == 400 and stats.bytes > 400 * 16 * 4 and stats.build_s >= 0
    index.close()
    exact.close()


def test_bm25_runs_through_the_registry() -> None:
    texts = ["python list append", "dict keys values", "list comprehension python", "zip"]
    docs = Documents(("a", "b", "c", "d"), texts=texts)
    index = INDEX_KINDS.build(INDEX_KINDS.get("bm25").options(stemmer=None), docs,
                              where="first_stage.bm25")
    ranking = index.search(Queries(("q",), texts=["python list"]), 3)
    # documents sharing no term with the query are not returned
    assert {ranking.doc_ids[i] for i in ranking.indices[0] if i >= 0} == {"a", "c"}
    assert index.proof().params["vocabulary"] > 0 and index.stats().bytes > 0
    index.add(Documents(("e",), texts=["python python list list"]))
    ranking = index.search(Queries(("q",), texts=["python list"]), 3)
    assert ranking.doc_ids[ranking.indices[0, 0]] == "e"
    index.close()
