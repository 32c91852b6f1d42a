"""``kind: qdrant`` with ``url:``: a Qdrant server through qdrant-client (issue 30).

A real Qdrant server cannot run on the test machines, so these tests talk to a STAND-IN
for one (tests/support/qdrant_standin.py): a loopback HTTP server that speaks the part of
Qdrant's REST API qdrant-client uses here, with qdrant-client's own request and response
shapes, backed by Qdrant's real engine in-process (qdrant-edge-py), so HNSW and
quantization are Qdrant's own. One stand-in serves the session (``qdrant_standin``); the
tests that kill a server start their own. What a real server adds (its version, its
optimizer's timing, its disk) is not tested here.

What is checked: the same options give the same rankings through the URL as through the
in-process shard; a rerun reuses the collection with no upload; an interrupted upload is
resumed with no point twice and none lost; a sweep searches the one collection; and each
fault is exit 2 (``InputError``) naming its field: other dimensions, another distance, a
collection evalq did not make, an option the server refuses, an unreachable or silent
server, a server killed mid-run, a missing or refused API key, a missing extra. The
option refusals need no server and run in the fast tier.
"""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalq.app.cli import main
from evalq.core.errors import InputError, MissingExtraError
from evalq.core.ranking import Ranking
from evalq.retrieve import sweep
from evalq.retrieve.kinds import Documents, KindOptions, Queries, recall_at
from evalq.retrieve.qdrant_server import QdrantServerIndex
from evalq.retrieve.registry import INDEX_KINDS
from support import recipes
from support.clustered import clustered

K = 10
DOCS, QUERIES = clustered(1500, 32, 30, seed=3)


def _options(**spec: Any) -> KindOptions:
    return INDEX_KINDS.parse({"kind": "qdrant", **spec}, "vectors", "faiss")


def _run(options: KindOptions, docs: Documents = DOCS, queries: Queries | None = None
         ) -> tuple[Ranking, Any, dict[str, Any]]:
    """Build, search (``queries``; left out, QUERIES for DOCS or ``docs``' first five
    vectors), prove and cost one index, closed after."""
    if queries is None:
        queries = QUERIES if docs is DOCS else Queries(
            tuple(f"q{i}" for i in range(5)), np.asarray(docs.vectors)[:5])
    index = INDEX_KINDS.build(options, docs, where="candidates.qd.index")
    try:
        return index.search(queries, K), index.proof(), dict(index.stats().detail)
    finally:
        index.close()


def _refused(options: KindOptions, docs: Documents = DOCS) -> InputError:
    with pytest.raises(InputError) as err:
        _run(options, docs)
    return err.value


def _docs(seed: int, n: int = 600, dim: int = 16) -> Documents:
    return clustered(n, dim, 1, seed=seed)[0]


# -- options: the fast tier ---------------------------------------------------------------

@pytest.mark.parametrize(("spec", "needle"), [
    ({"url": "http://localhost:6333", "path": "/tmp"}, "url (a Qdrant server) and path"),
    ({"collection": "team"}, "collection apply to a Qdrant server (url:)"),
    ({"api_key_env": "QDRANT_API_KEY"}, "api_key_env apply to a Qdrant server"),
    ({"url": "localhost:6333"}, "is not an http(s) URL"),
    ({"url": "http://q:6333", "api_key_env": "sk-123 456"}, "NAME of the variable"),
    ({"url": "http://q:6333", "collection": "a/b"}, "collection"),
])
def test_url_options_are_refused_when_read(spec: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValueError) as err:
        _options(**spec)
    assert needle in str(err.value)


def test_the_record_masks_a_password_in_the_url_and_keeps_only_the_keys_name() -> None:
    record = _options(url="https://me:s3cret@q.example:6333",
                      api_key_env="QDRANT_API_KEY").record()
    assert record["url"] == "https://me:***@q.example:6333"
    assert record["api_key_env"] == "QDRANT_API_KEY" and "s3cret" not in str(record)


def test_without_qdrant_client_the_fix_names_the_extra(monkeypatch: pytest.MonkeyPatch
                                                       ) -> None:
    monkeypatch.setitem(sys.modules, "qdrant_client", None)
    with pytest.raises(MissingExtraError) as err:
        INDEX_KINDS.build(_options(url="http://127.0.0.1:9"), DOCS, where="x")
    assert "qdrant-client" in str(err.value) and "pip install 'evalq[vdb]'" in str(err.value)


# -- through the stand-in: the same search as in-process ---------------------------------

@pytest.mark.server
@pytest.mark.parametrize("spec", [
    {"search_params": {"exact": True}},
    {"hnsw_config": {"m": 16, "ef_construct": 100}, "search_params": {"hnsw_ef": 128}},
    {"quantization_config": {"scalar": {"type": "int8"}},
     "search_params": {"hnsw_ef": 128, "quantization": {"rescore": True,
                                                       "oversampling": 2.0}}},
])
def test_the_url_ranks_as_the_in_process_shard(qdrant_standin: Any, exact: Ranking,
                                               spec: dict[str, Any]) -> None:
    remote, remote_proof, stats = _run(_options(url=qdrant_standin.url, **spec))
    local, local_proof, _ = _run(_options(**spec))
    assert remote_proof.method == local_proof.method
    assert remote_proof.exact == local_proof.exact
    assert remote_proof.params["indexed_vectors"] == len(DOCS.ids) == stats["points"]
    np.testing.assert_allclose(remote.scores, local.scores, atol=1e-4)
    for row in range(len(QUERIES.ids)):
        assert set(remote.indices[row]) == set(local.indices[row]), row
    assert recall_at(remote, exact, K).mean() >= 0.95
    # the first two share build options, so the second reuses the first's collection
    assert (stats["upsert_s"] > 0) != stats["reused"]
    assert stats["collection"] == f"evalq-{stats['cache_key'][:24]}"
    assert stats["server"] == f"the Qdrant server at {qdrant_standin.url}"


@pytest.mark.server
def test_a_rerun_reuses_the_collection_with_no_upload(qdrant_standin: Any) -> None:
    docs = _docs(11)
    options = _options(url=qdrant_standin.url, hnsw_config={"m": 8, "ef_construct": 32})
    first = _run(options, docs)[2]
    before = qdrant_standin.upserts()
    _, proof, stats = _run(_options(url=qdrant_standin.url, hnsw_config={
        "m": 8, "ef_construct": 32}, search_params={"hnsw_ef": 64}), docs)
    assert qdrant_standin.upserts() == before  # no upload
    assert not first["reused"] and first["rows_loaded"] == len(docs.ids)
    assert stats["reused"] and stats["rows_loaded"] == 0 and stats["upsert_s"] == 0.0
    assert stats["cache_key"] == first["cache_key"] and stats["points"] == len(docs.ids)
    assert proof.method == "HNSW" and not proof.exact


@pytest.mark.server
def test_an_interrupted_upload_resumes_to_exactly_the_corpus(
        qdrant_standin: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = _docs(12, n=1400)
    options = _options(url=qdrant_standin.url, search_params={"exact": True})
    real = QdrantServerIndex._upsert

    def half_then_stop(self: QdrantServerIndex, vectors: np.ndarray, have: set[int]) -> None:
        real(self, vectors[:len(vectors) // 2], have)
        raise KeyboardInterrupt

    monkeypatch.setattr(QdrantServerIndex, "_upsert", half_then_stop)
    with pytest.raises(KeyboardInterrupt):
        INDEX_KINDS.build(options, docs, where="x")
    monkeypatch.undo()
    ranking, _, stats = _run(options, docs)
    assert stats["rows_resumed"] == len(docs.ids) // 2 and not stats["reused"]
    assert stats["rows_loaded"] == len(docs.ids) - len(docs.ids) // 2
    assert stats["points"] == len(docs.ids)  # upserted by id: none twice, none lost
    assert ranking.indices[0, 0] == 0  # the first document, found in the resumed corpus


@pytest.mark.server
def test_a_sweep_searches_the_one_collection(qdrant_standin: Any) -> None:
    options = _options(url=qdrant_standin.url, hnsw_config={"m": 4, "ef_construct": 8},
                       sweep={"hnsw_ef": [4, 64]})
    before = qdrant_standin.upserts()
    index = INDEX_KINDS.build(options, DOCS, where="x")
    try:
        name, points = sweep.sweep_index(index, options, QUERIES, K) or ("", ())
    finally:
        index.close()
    assert name == "hnsw_ef" and [p.value for p in points] == [4, 64]
    assert [p.proof.params["search_params"]["hnsw_ef"] for p in points] == [4, 64]
    assert all(len(p.seconds) == len(QUERIES.ids) for p in points)
    assert qdrant_standin.upserts() - before <= 3  # one upload (1500 points, 512 a batch)


# -- faults: each exit 2 naming its field -------------------------------------------------

@pytest.mark.server
def test_a_collection_of_other_dimensions_or_distance_is_refused(qdrant_standin: Any
                                                                 ) -> None:
    _run(_options(url=qdrant_standin.url, collection="team-dims"), _docs(13, dim=16))
    err = _refused(_options(url=qdrant_standin.url, collection="team-dims"),
                   _docs(13, dim=24))
    assert err.field == "candidates.qd.index.collection"
    assert "holds 16 dimensions, distance Dot" in str(err) and "24 dimensions" in str(err)
    err = _refused(_options(url=qdrant_standin.url, collection="team-dims",
                            distance="Cosine"), _docs(13, dim=16))
    assert err.field == "candidates.qd.index.collection" and "distance Cosine" in str(err)


@pytest.mark.server
def test_a_named_collection_of_other_vectors_is_never_written_into(qdrant_standin: Any
                                                                   ) -> None:
    from qdrant_client import QdrantClient, models

    client = QdrantClient(url=qdrant_standin.url, prefer_grpc=False,
                          check_compatibility=False)
    try:
        client.create_collection("team-own", vectors_config=models.VectorParams(
            size=16, distance=models.Distance.DOT))
    finally:
        client.close()
    before = qdrant_standin.upserts()
    err = _refused(_options(url=qdrant_standin.url, collection="team-own"), _docs(14))
    assert err.field == "candidates.qd.index.collection" and "not made by evalq" in str(err)
    _run(_options(url=qdrant_standin.url, collection="team-a"), _docs(14))
    err = _refused(_options(url=qdrant_standin.url, collection="team-a"), _docs(15))
    assert "holds other vectors" in str(err)
    assert qdrant_standin.upserts() - before == 2  # team-a's one upload only


@pytest.mark.server
@pytest.mark.parametrize(("refusal", "said", "spec", "field"), [
    ("quantization_config.binary", "Wrong input: Validation error in JSON body: "
     "[quantization_config.binary.encoding: unknown variant `two_bits`]",
     {"quantization_config": {"binary": {"encoding": "two_bits"}}}, "quantization_config"),
    ("hnsw_config", "Wrong input: not supported",
     {"hnsw_config": {"m": 12}}, "hnsw_config"),
    ("params.quantization", "Wrong input: not supported",
     {"quantization_config": {"scalar": {}},
      "search_params": {"quantization": {"oversampling": 2.0}}}, "search_params"),
])
def test_an_option_the_server_refuses_is_named(qdrant_standin: Any, refusal: str,
                                               said: str, spec: dict[str, Any],
                                               field: str) -> None:
    qdrant_standin.refusals[refusal] = said
    try:
        err = _refused(_options(url=qdrant_standin.url, **spec), _docs(16))
    finally:
        qdrant_standin.refusals.clear()
    assert err.field == f"candidates.qd.index.{field}"
    assert f"refused {field} (HTTP 400: {said})" in str(err)


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_an_unreachable_server_is_exit_2_naming_url(closed_port: int) -> None:
    err = _refused(_options(url=f"http://127.0.0.1:{closed_port}"))
    assert err.field == "candidates.qd.index.url"
    assert f"the Qdrant server at http://127.0.0.1:{closed_port} did not answer" in str(err)
    assert "check that the server is up" in str(err)


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield int(sock.getsockname()[1])


def test_a_silent_server_times_out_naming_url_and_timeout(silent_port: int) -> None:
    err = _refused(_options(url=f"http://127.0.0.1:{silent_port}", timeout=1))
    assert err.field == "candidates.qd.index.url" and "raise timeout" in str(err)


@pytest.mark.server
def test_a_server_killed_mid_run_is_exit_2_and_its_collection_stays() -> None:
    from support.qdrant_standin import QdrantStandIn

    standin = QdrantStandIn()
    try:
        index = INDEX_KINDS.build(_options(url=standin.url), _docs(17),
                                  where="candidates.qd.index")
        standin.stop()
        try:
            with pytest.raises(InputError) as err:
                index.search(QUERIES.__class__(("q",), np.ones((1, 16), np.float32)), K)
        finally:
            index.close()
    finally:
        standin.close()
    assert err.value.field == "candidates.qd.index.url"
    assert "did not answer" in str(err.value) and "rerun" in str(err.value)
    assert "stay on the server" in str(err.value)


@pytest.mark.server
@pytest.mark.filterwarnings("ignore:Api key is used with an insecure connection")
def test_the_api_key_is_read_from_the_named_variable_and_never_recorded(
        qdrant_standin: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    options = _options(url=qdrant_standin.url, api_key_env="EVALQ_TEST_QDRANT_KEY")
    err = _refused(options, _docs(18))
    assert err.field == "candidates.qd.index.api_key_env" and "not set" in str(err)
    qdrant_standin.api_key = "key-0123456789"
    try:
        monkeypatch.setenv("EVALQ_TEST_QDRANT_KEY", "wrong-key-999")
        err = _refused(options, _docs(18))
        assert err.field == "candidates.qd.index.api_key_env" and "HTTP 401" in str(err)
        monkeypatch.setenv("EVALQ_TEST_QDRANT_KEY", "key-0123456789")
        _, proof, stats = _run(options, _docs(18))
    finally:
        qdrant_standin.api_key = None
    recorded = str(stats) + str(proof) + str(options.record())
    assert stats["points"] == 600 and "key-0123456789" not in recorded


@pytest.mark.server
def test_a_grey_collection_is_nudged_and_then_indexed(qdrant_standin: Any,
                                                      monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    """A restarted server reports pending optimizations as ``grey`` and starts them only
    on an update of the collection: the wait sends one, then finds the points indexed."""
    upsert = QdrantServerIndex._upsert

    def then_restarted(self: QdrantServerIndex, vectors: np.ndarray, have: set[int]
                       ) -> None:
        upsert(self, vectors, have)
        qdrant_standin.collections[self.collection].grey = True

    monkeypatch.setattr(QdrantServerIndex, "_upsert", then_restarted)
    _, proof, stats = _run(_options(url=qdrant_standin.url, index_wait_s=20), _docs(19))
    assert ("PATCH", f"/collections/{stats['collection']}") in qdrant_standin.requests
    assert stats["indexed_vectors"] == stats["points"] == 600 and proof.method == "HNSW"


@pytest.mark.server
def test_a_server_that_never_indexes_is_exit_2_naming_index_wait_s(qdrant_standin: Any
                                                                  ) -> None:
    qdrant_standin.stalled = True
    try:
        err = _refused(_options(url=qdrant_standin.url, index_wait_s=0.5), _docs(20))
    finally:
        qdrant_standin.stalled = False
    assert err.field == "candidates.qd.index.index_wait_s"
    assert "had indexed 0 of 600 points" in str(err) and "raise index_wait_s" in str(err)
    _, _, stats = _run(_options(url=qdrant_standin.url), _docs(20))  # the rerun: no upload
    assert stats["reused"] and stats["indexed_vectors"] == 600


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.server
def test_a_run_whose_server_dies_is_exit_2_and_the_rerun_reuses_its_collections(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Through ``evalq run``: the server killed before the last candidate's search is
    exit 2 naming that candidate's url; the earlier variants' files stay; after the
    server restarts, the rerun finds both collections complete and uploads nothing."""
    from support.qdrant_standin import QdrantStandIn

    standin, out = QdrantStandIn(), tmp_path / "out"
    search = QdrantServerIndex.search

    def killed_before_int8(self: QdrantServerIndex, *args: Any, **kwargs: Any) -> Ranking:
        if self.options.quantization_config is not None:
            standin.stop()
        return search(self, *args, **kwargs)

    data = recipes.recipe(
        "qdrant-url", cache=tmp_path / "cache", queries=12, docs=40,
        candidates=[{"name": "fp32-qd", "index": {"kind": "qdrant", "url": standin.url}},
                    {"name": "fp32-qd-int8", "index": {
                        "kind": "qdrant", "url": standin.url,
                        "quantization_config": {"scalar": {"type": "int8"}}}}],
        metrics=["nDCG@10"], gates=[recipes.gate("nDCG@10", "qrels", max_drop="5%")],
        resamples=200)
    recipe = recipes.write(tmp_path / "qdrant-url.yaml", data)
    monkeypatch.setattr(QdrantServerIndex, "search", killed_before_int8)
    try:
        code = main(["run", str(recipe), "-o", str(out)])
        err = capsys.readouterr().err
        assert code == 2, err
        assert "field 'candidates.fp32-qd-int8.index.url'" in err and "Traceback" not in err
        assert f"the Qdrant server at {standin.url} did not answer" in err
        for done in ("fp32", "fp32-qd"):  # finished work is kept
            assert (out / "per_query" / "pydocs" / f"{done}.jsonl").is_file(), done
        assert json.loads((out / "manifest.json").read_text())["status"] == "failed"
        monkeypatch.setattr(QdrantServerIndex, "search", search)
        standin.restart()
        uploads = standin.upserts()
        assert main(["run", str(recipe), "-o", str(tmp_path / "again")]) in (0, 1)
        assert standin.upserts() == uploads
    finally:
        standin.close()
    variants = json.loads((tmp_path / "again" / "manifest.json").read_text())["variants"]
    for name in ("fp32-qd", "fp32-qd-int8"):
        entry = variants[name]["datasets"]["pydocs"]["index"]
        assert entry["reused"] and entry["rows_loaded"] == 0, name
        assert entry["url"] == standin.url and entry["proof"]["params"]["indexed_vectors"] == 40


def test_url_with_path_is_refused_by_the_plan_naming_the_index(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = recipes.write(tmp_path / "r.yaml", recipes.recipe(
        "qdrant-url", cache=tmp_path / "cache", candidates=[{"name": "qd", "index": {
            "kind": "qdrant", "url": "http://127.0.0.1:6333", "path": str(tmp_path)}}]))
    assert main(["plan", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert "field 'candidates.0.index': url (a Qdrant server) and path (the in-process " \
        "shard's folder) exclude each other. Fix: keep one" in err
