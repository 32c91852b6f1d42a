"""``documents: {qdrant: {url, collection, api_key_env, id_payload}}``: a candidate's
document vectors read from a collection on a team's Qdrant server (issue 31, issue 30).

A real Qdrant server cannot run on the test machines, so these tests read from a
STAND-IN for one (tests/support/qdrant_standin.py, the session's ``qdrant_standin``): a
loopback HTTP server that speaks the part of Qdrant's REST API qdrant-client uses (here:
collection info, scroll with payload and vectors, the list of collections), with
qdrant-client's own request and response shapes, backed by Qdrant's real engine
in-process. What a real server adds (its version, its paging under concurrent writes)
is not tested here.

What is checked: rows come back by corpus id in corpus order through more than one
scroll page; a collection of the corpus plans, and a run over it ranks exactly as the
same vectors given as a ``.npy`` file (after the probe against the reference); each
fault is exit 2 naming its field: url with path, an unreachable server, a missing
collection, named vectors, sparse vectors only, a point without the id payload,
repeated ids, a width other than the model's, a missing API key.
"""

from __future__ import annotations

import socket
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalq.app.api import run_recipe_file
from evalq.app.cli import main
from evalq.core.errors import InputError
from evalq.recipe.plan import PlanError, describe_plan
from evalq.retrieve import stored_vectors
from support import recipes
from support.deployed import (
    corpus_ids,
    plan_documents,
    random_rows,
    reference_documents,
)


def _client(standin: Any) -> Any:
    from qdrant_client import QdrantClient

    return QdrantClient(url=standin.url, prefer_grpc=False, check_compatibility=False)


def _collection(standin: Any, ids: list[str], vectors: np.ndarray, *,
                payload: bool = True, config: Any = None) -> str:
    """A team's collection: the documents as points in reverse order (payload ``id``:
    the document id, or the point id itself when ``payload`` is false); ``config``:
    another ``vectors_config`` (named vectors), with no points."""
    from qdrant_client import models

    name = f"team-{uuid.uuid4().hex[:8]}"
    client = _client(standin)
    try:
        if config is not None:
            client.create_collection(name, **config)
            return name
        client.create_collection(name, vectors_config=models.VectorParams(
            size=int(vectors.shape[1]), distance=models.Distance.DOT))
        client.upsert(name, points=[
            models.PointStruct(id=i if payload else int(d), vector=v.tolist(),
                               payload={"id": d, "lang": "en"} if payload else None)
            for i, (d, v) in enumerate(zip(ids[::-1], vectors[::-1]))], wait=True)
    finally:
        client.close()
    return name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- options: the fast tier ---------------------------------------------------------------

def test_url_with_path_is_refused_by_the_plan_naming_the_source(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = recipes.write(tmp_path / "r.yaml", recipes.recipe(
        "qdrant-docs", cache=tmp_path / "cache", candidates=[{
            "name": "kept", "queries": "reference", "documents": {"qdrant": {
                "url": "http://127.0.0.1:6333", "path": str(tmp_path),
                "collection": "docs"}}}]))
    assert main(["plan", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert "candidates.0.documents" in err, err
    assert "url (a Qdrant server) and path (a shard on disk) exclude each other" in err


@pytest.mark.parametrize(("spec", "needle"), [
    ({"url": "http://q:6333"}, "name the one with the corpus's vectors"),
    ({"url": "q:6333", "collection": "c"}, "is not an http(s) URL"),
    ({"url": "http://q:6333", "collection": "c", "api_key_env": "sk 1"},
     "NAME of the variable"),
    ({"path": "/tmp", "api_key_env": "QDRANT_API_KEY"}, "api_key_env applies to a Qdrant"),
    ({"collection": "c"}, "give path (a Qdrant shard on disk) or url")])
def test_a_server_source_is_checked_when_read(tmp_path: Path, spec: dict[str, Any],
                                              needle: str) -> None:
    with pytest.raises(InputError) as caught:
        plan_documents(tmp_path, {"qdrant": spec})
    assert needle in str(caught.value) and caught.value.field == "candidates.0.documents"


# -- through the stand-in -----------------------------------------------------------------

@pytest.mark.server
def test_rows_come_back_by_corpus_id_across_scroll_pages(qdrant_standin: Any) -> None:
    n = stored_vectors.SCROLL_PAGE + 100  # more than one page
    ids = [f"doc-{i}" for i in range(n)]
    vectors = random_rows(n, width=8)
    name = _collection(qdrant_standin, ids, vectors)
    wanted = [ids[5], ids[n - 1], ids[1030], ids[0]]
    got = stored_vectors.qdrant_server_rows(qdrant_standin.url, name, None, "id", wanted,
                                            "x")
    np.testing.assert_array_equal(got, vectors[[5, n - 1, 1030, 0]])
    header = stored_vectors.qdrant_server_header(qdrant_standin.url, name, None, "id", "x")
    assert sorted(header[0]) == sorted(ids) and header[1] == 8
    by_point = _collection(qdrant_standin, [str(i) for i in range(40)], vectors[:40],
                           payload=False)
    np.testing.assert_array_equal(stored_vectors.qdrant_server_rows(
        qdrant_standin.url, by_point, None, None, ["7", "3"], "x"), vectors[[7, 3]])
    with pytest.raises(InputError, match=r"lacks 1 documents of the corpus, e\.g\. other"):
        stored_vectors.qdrant_server_rows(qdrant_standin.url, name, None, "id",
                                          ["doc-1", "other"], "x")


@pytest.mark.server
def test_a_collection_of_the_corpus_plans(qdrant_standin: Any, tmp_path: Path) -> None:
    ids = [*corpus_ids(), "extra-doc"]
    name = _collection(qdrant_standin, ids, random_rows(len(ids)))
    plan = plan_documents(tmp_path, {"qdrant": {"url": qdrant_standin.url, "collection": name}})
    assert f"documents reused from Qdrant collection {name} at {qdrant_standin.url}" \
        in describe_plan(plan)


@pytest.mark.server
@pytest.mark.parametrize(("case", "field", "words"), [
    ("unreachable", "qdrant.url", "did not answer"),
    ("no collection", "qdrant.collection", "there is no collection 'missing-"),
    ("named", "qdrant.collection", "holds named vectors (a, b)"),
    ("sparse", "qdrant.collection", "holds only sparse vectors"),
    ("no payload", "qdrant.id_payload", "has no payload key 'doc'"),
    ("dupes", "", "repeat"),
    ("width", "", "are 100 wide, but deployed's model"),
    ("no key", "qdrant.api_key_env", "QDRANT_TEST_KEY_UNSET (api_key_env) is not set")])
def test_a_bad_server_source_is_refused_with_the_fix(
        qdrant_standin: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str,
        field: str, words: str) -> None:
    from qdrant_client import models

    monkeypatch.delenv("QDRANT_TEST_KEY_UNSET", raising=False)
    ids = corpus_ids()
    if case == "dupes":
        ids = [*ids[:-1], ids[0]]
    config = {"named": {"vectors_config": {
        n: models.VectorParams(size=8, distance=models.Distance.DOT) for n in "ab"}},
        "sparse": {"vectors_config": {}, "sparse_vectors_config": {
            "text": models.SparseVectorParams()}}}.get(case)
    name = _collection(qdrant_standin, ids, random_rows(len(ids), 100 if case == "width"
                                                    else 384), config=config)
    source: dict[str, Any] = {"url": qdrant_standin.url, "collection": name}
    if case == "unreachable":
        source["url"] = f"http://127.0.0.1:{_free_port()}"
    elif case == "no collection":
        source["collection"] = f"missing-{name}"
    elif case == "no payload":
        source["id_payload"] = "doc"
    elif case == "no key":
        source["api_key_env"] = "QDRANT_TEST_KEY_UNSET"
    with pytest.raises(PlanError) as caught:
        plan_documents(tmp_path, {"qdrant": source})
    text = str(caught.value)
    where = "candidates.0.documents" + (f".{field}" if field else "")
    assert words in text and where in text, text


# -- end to end: the probe, and the same ranking as a .npy file --------------------------

@pytest.mark.slow
@pytest.mark.model
@pytest.mark.server
def test_a_server_collection_ranks_as_the_same_vectors_in_a_npy_file(
        qdrant_standin: Any, tmp_path: Path) -> None:
    # the deployed index: today's reference vectors of the corpus, slightly moved
    data, ds, docs = reference_documents(tmp_path)
    docs = docs + np.random.default_rng(7).normal(scale=2e-3, size=docs.shape).astype(
        np.float32)  # within the probe's tolerance, but not the reference's own vectors
    ids = list(ds.corpus.ids)
    np.save(tmp_path / "docs.npy", docs)
    (tmp_path / "ids.txt").write_text("\n".join(ids) + "\n", encoding="utf-8")
    name = _collection(qdrant_standin, ids, docs)
    probe = {"min_cosine": 0.99, "norm_tolerance": 0.05}
    candidates = [
        {"name": "npy", "queries": "reference", "documents": {
            "path": "docs.npy", "ids": "ids.txt", "probe": probe}},
        {"name": "qd", "queries": "reference", "documents": {"qdrant": {
            "url": qdrant_standin.url, "collection": name}, "probe": probe}}]
    outcome = run_recipe_file(recipes.write(tmp_path / "keep.yaml", {
        **data, "candidates": candidates}), progress=False)
    variants = outcome.summary["datasets"]["pydocs"]["variants"]
    encode = variants["qd"]["encode"]
    assert encode["reused"]["documents"] == (f"Qdrant collection {name} at "
                                             f"{qdrant_standin.url}")
    assert encode["probe"]["passed"] and encode["probe"]["lowest_cosine"] >= 0.99
    assert encode["probe"]["lowest_cosine"] == variants["npy"]["encode"]["probe"][
        "lowest_cosine"]
    runs = {v: [line.split()[:5] for line in (tmp_path / "out" / "runs" / "pydocs" /
                                              f"{v}.trec").read_text().splitlines()]
            for v in ("npy", "qd")}
    assert runs["qd"] and [r[:4] for r in runs["qd"]] == [r[:4] for r in runs["npy"]]
    np.testing.assert_allclose([float(r[4]) for r in runs["qd"]],
                               [float(r[4]) for r in runs["npy"]], rtol=1e-6, atol=1e-6)
    for metric, value in variants["npy"]["metrics"].items():
        assert variants["qd"]["metrics"][metric]["value"] == value["value"], metric
