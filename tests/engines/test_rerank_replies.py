"""Served rerankers that lie: every ``/rerank``, ``/v1/rerank`` and ``/score`` reply is
checked against its schema before a score is read from it.

A score that is a bool would be read as 1.0/0.0, a string or null was a traceback (exit 3);
each is now exit 2 naming the server, the field and how many documents were sent. The
stand-in server (``fake_rerank_server``) is given a stub model here: the answers are
rewritten anyway, and a correct one must still be accepted.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from evalq.core.errors import InputError
from evalq.engines.rerank_http import HttpReranker
from support.fake_rerank_server import FakeRerankServer, RerankState

ROUTES = {"tei": "/rerank", "rerank-api": "/v1/rerank", "score": "/score"}
# Per API style: where the items are (None: the reply is the list) and each item's score key.
RERANK_SHAPES = {"tei": (None, "score"), "rerank-api": ("results", "relevance_score"),
                 "score": ("data", "score")}
DOCS = ["alpha beta", "gamma", "delta epsilon zeta"]


class _Model:
    """Scores by document length: enough for a server whose answer is rewritten."""

    def predict(self, pairs: list[tuple[str, str]], **_: Any) -> list[float]:
        return [len(doc) / 100 for _, doc in pairs]


@pytest.fixture(scope="module")
def server():
    with FakeRerankServer(RerankState(model=_Model())) as running:
        yield running


def _items(body: Any, style: str) -> list[dict[str, Any]]:
    key, _ = RERANK_SHAPES[style]
    return body if key is None else body[key]


def _set_first(value: Any, field: str = "score") -> Callable[[str, Any, str], Any]:
    def rewrite(path: str, body: Any, style: str) -> Any:
        item = _items(body, style)[0]
        key = RERANK_SHAPES[style][1] if field == "score" else field
        if value is _DROP:
            del item[key]
        else:
            item[key] = value
        return body
    return rewrite


_DROP = object()


def _score(server: FakeRerankServer, style: str,
           rewrite: Callable[[str, Any, str], Any] | None) -> np.ndarray:
    server.state.rewrite = None if rewrite is None else (
        lambda path, body: rewrite(path, body, style))
    client = HttpReranker(server.url, style=style, model="fixture", activation="sigmoid",
                          max_length=256, retries=0)
    try:
        return client.score(["query"] * len(DOCS), DOCS)
    finally:
        client.close()
        server.state.rewrite = None


STYLES = ["tei", "rerank-api", "score"]


@pytest.mark.parametrize("style", STYLES)
def test_a_correct_answer_is_still_accepted(server, style: str) -> None:
    scores = _score(server, style, None)
    assert scores.tolist() == pytest.approx([len(d) / 100 for d in DOCS])


LIES = {"true": True, "false": False, "string": "0.5", "null": None, "nan": math.nan,
        "infinity": math.inf, "list": [0.5], "missing score": _DROP}


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("lie", list(LIES))
def test_a_score_that_is_not_a_finite_number_is_exit_2(server, style: str, lie: str) -> None:
    with pytest.raises(InputError) as info:
        _score(server, style, _set_first(LIES[lie]))
    error = info.value
    score_key = RERANK_SHAPES[style][1]
    assert error.field is not None and error.field.endswith(f".{score_key}")
    assert f"{server.url}{ROUTES[style]}" in error.message
    assert f"{len(DOCS)} documents" in error.message
    assert error.fix


INDEX_LIES = {"missing index": _DROP, "bool index": True, "string index": "0",
              "out of range": len(DOCS), "negative": -1, "repeated": 1}


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("lie", list(INDEX_LIES))
def test_an_index_that_is_not_a_distinct_position_is_exit_2(server, style: str,
                                                            lie: str) -> None:
    def rewrite(path: str, body: Any, style: str) -> Any:
        items = _items(body, style)
        # make the lie the only defect: "repeated" gives item 0 another item's index
        target = next(i for i in items if i["index"] != 1) if lie == "repeated" else items[0]
        if INDEX_LIES[lie] is _DROP:
            del target["index"]
        else:
            target["index"] = INDEX_LIES[lie]
        return body

    with pytest.raises(InputError) as info:
        _score(server, style, rewrite)
    assert info.value.field is not None and info.value.field.endswith(".index")
    assert f"{len(DOCS)} documents" in info.value.message


@pytest.mark.parametrize("style", STYLES)
def test_a_reply_of_the_wrong_shape_is_exit_2(server, style: str) -> None:
    with pytest.raises(InputError) as info:
        _score(server, style, lambda path, body, style: {"error": "nope"}
               if style == "tei" else [])
    assert str(ROUTES[style]) in info.value.message and info.value.fix


def test_a_short_answer_keeps_its_message(server) -> None:
    server.state.drop_one = True
    try:
        with pytest.raises(InputError) as info:
            _score(server, "score", None)
    finally:
        server.state.drop_one = False
    assert "returned scores for 2 of 3 texts" in info.value.message
    assert info.value.field == "http.url"


def test_the_parser_reads_scores_back_into_request_order() -> None:
    from evalq.engines.replies import parse_rerank_reply

    body = {"results": [{"index": 2, "relevance_score": 0.9},
                        {"index": 0, "relevance_score": 1},
                        {"index": 1, "relevance_score": -0.5}]}
    assert parse_rerank_reply(body, 3, "http://x/v1/rerank", "rerank-api").tolist() == [
        1.0, -0.5, 0.9]
    with pytest.raises(InputError, match="not a finite number"):
        parse_rerank_reply([{"index": 0, "score": 10 ** 400}], 1, "http://x/rerank", "tei")
