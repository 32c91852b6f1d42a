"""The reranker score cache never lies: an edited score fails its checksum, an unreadable
file is moved aside and rebuilt, and a different model redeployed behind the same URL gets
a different key. Each is recomputed with one warning naming the cache file."""

from __future__ import annotations

import sqlite3
import warnings

import numpy as np
import pytest

from evalq.encode.pairs import score_pairs
from evalq.encode.scorecache import ScoreCache
from evalq.engines.rerank_http import HttpReranker

QS = ["q one", "q one", "q two", "q three"]
DS = ["doc a", "doc b", "doc c", "doc d"]


class _Stub:
    kind = "cross-encoder"

    def __init__(self) -> None:
        self.calls = 0

    def fingerprint(self) -> str:
        return "stub"

    def pair_lengths(self, queries, documents):
        return [len(q) + len(d) for q, d in zip(queries, documents)]

    def score(self, queries, documents):
        self.calls += 1
        return np.array([len(q) * 0.1 + len(d) * 0.01 for q, d in zip(queries, documents)])


def _run(root):
    cache = ScoreCache(root)
    try:
        return score_pairs(_Stub(), QS, DS, cache=cache)
    finally:
        cache.close()


def _one_clean_warning(record, path) -> None:
    assert len(record) == 1, [str(w.message) for w in record]
    message = str(record[0].message)
    assert str(path) in message and "recomput" in message
    assert "evalq" not in record[0].filename  # no line of evalq's source is shown


def test_edited_score_fails_its_checksum_and_is_recomputed(tmp_path):
    expected, _ = _run(tmp_path)
    db = sqlite3.connect(tmp_path / "scores.sqlite")
    with db:
        db.execute("UPDATE scores_v2 SET score = score + 0.5")
    db.close()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        again, stats = _run(tmp_path)
    _one_clean_warning(record, tmp_path / "scores.sqlite")
    assert stats.cached == 0 and stats.computed == 4
    np.testing.assert_array_equal(again, expected)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # rewritten: verified on the next read
        third, stats = _run(tmp_path)
    assert stats.cached == 4
    np.testing.assert_array_equal(third, expected)


@pytest.mark.parametrize("damage", ["truncated", "random"])
def test_unreadable_cache_file_is_rebuilt(tmp_path, damage):
    expected, _ = _run(tmp_path)
    path = tmp_path / "scores.sqlite"
    db = sqlite3.connect(path)
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db.close()
    data = path.read_bytes()
    rng = np.random.default_rng(0)
    path.write_bytes(data[:len(data) // 3 + 100] if damage == "truncated"
                     else rng.bytes(len(data)))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        again, stats = _run(tmp_path)
    _one_clean_warning(record, path)
    assert stats.computed == 4
    np.testing.assert_array_equal(again, expected)
    assert (tmp_path / "scores.sqlite.corrupt").exists()
    _, stats = _run(tmp_path)
    assert stats.cached == 4


class _FakeModel:
    """Stands in for a CrossEncoder behind the fake server: ``offset`` is the model."""

    def __init__(self, offset: float) -> None:
        self.offset = offset

    def predict(self, pairs, activation_fn=None, batch_size=32):
        return [self.offset + 0.01 * len(q) + 0.001 * len(t) for q, t in pairs]


@pytest.mark.parametrize("style", ["tei", "rerank-api"])
def test_model_redeployed_behind_the_same_url_gets_a_new_key(tmp_path, style):
    pytest.importorskip("torch")
    from support.fake_rerank_server import FakeRerankServer, RerankState

    state = RerankState(model=_FakeModel(0.0))
    with FakeRerankServer(state) as server:
        runs = []
        for offset in (0.0, 0.25):  # same URL, same /info: a different model's scores
            state.model = _FakeModel(offset)
            client = HttpReranker(server.url, style=style, model=None, activation="none",
                                  max_length=256)
            cache = ScoreCache(tmp_path)
            try:
                runs.append(score_pairs(client, QS, DS, cache=cache, self_batching=True))
            finally:
                cache.close()
                client.close()
        (first, _), (second, stats) = runs
        assert stats.cached == 0 and stats.computed == 4
        np.testing.assert_allclose(second - first, 0.25, atol=1e-9)
        client = HttpReranker(server.url, style=style, model=None, activation="none",
                              max_length=256)
        cache = ScoreCache(tmp_path)
        try:  # the same model again: every score is a hit
            third, stats = score_pairs(client, QS, DS, cache=cache, self_batching=True)
        finally:
            cache.close()
            client.close()
        assert stats.cached == 4 and client.requests == 0
        np.testing.assert_array_equal(third, second)
