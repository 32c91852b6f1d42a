"""Parsing embedding and rerank replies from servers: anything malformed is the server's
fault.

A server that answers with the wrong shape (``data`` not a list, an item without
``embedding``, strings where floats belong, vectors of different lengths, the wrong count)
is a user-side fault (exit 2) named by URL and field, never a traceback. NaN, Inf and
all-zero vectors parse here and are refused by ``encode.py``, which can name the chunk.

A rerank score is one number per document sent, and nothing else is read as one:
``true``/``false`` would otherwise become 1.0/0.0 and ``"0.5"`` or ``null`` a traceback,
so a bool, a string, null, NaN or infinity, an index out of range, missing or repeated is
refused here (exit 2), naming the server, the field and how many documents were sent.
"""

from __future__ import annotations

import base64
import binascii
import math
from typing import Any

import numpy as np

from evalq.core.errors import InputError

_FIX = ("check that the URL points at an embeddings server of the right API (openai: "
        "/v1/embeddings, tei: /embed) and that it is healthy")


def _bad(url: str, what: str, field: str = "url") -> InputError:
    return InputError(message=f"{url} sent a malformed reply: {what}", field=field, fix=_FIX)


def _vector(value: Any, url: str, where: str, encoding_format: str) -> np.ndarray:
    if encoding_format == "base64":
        if not isinstance(value, str):
            raise _bad(url, f"{where} should be a base64 string, got {type(value).__name__}")
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise _bad(url, f"{where} is not valid base64") from None
        if len(raw) % 4 or not raw:
            raise _bad(url, f"{where} decodes to {len(raw)} bytes, not a float32 vector")
        return np.frombuffer(raw, dtype="<f4").astype(np.float32)
    if not isinstance(value, list) or not value:
        raise _bad(url, f"{where} should be a non-empty list of numbers, got "
                   f"{type(value).__name__ if not isinstance(value, list) else 'an empty list'}")
    for x in value:
        if isinstance(x, bool) or not isinstance(x, int | float):
            raise _bad(url, f"{where} holds a non-numeric value ({str(x)[:40]!r})")
    try:
        return np.asarray([float(x) for x in value], dtype=np.float32)
    except OverflowError:  # an int beyond float range
        raise _bad(url, f"{where} holds a number too large for a float") from None


def _stack(vectors: list[np.ndarray], url: str) -> np.ndarray:
    dims = sorted({len(v) for v in vectors})
    if len(dims) > 1:
        raise _bad(url, f"vectors of different lengths ({', '.join(map(str, dims[:5]))})")
    return np.stack(vectors).astype(np.float32, copy=False)


def parse_openai_reply(body: Any, n: int, url: str,
                       encoding_format: str = "float") -> tuple[np.ndarray, str | None]:
    """``(vectors in input order, served model name)`` from a ``/v1/embeddings`` reply."""
    if not isinstance(body, dict):
        raise _bad(url, f"the reply is a {type(body).__name__}, not a JSON object")
    data = body.get("data")
    if not isinstance(data, list):
        raise _bad(url, f"'data' is {type(data).__name__}, not a list", "data")
    if len(data) != n:
        raise _bad(url, f"{len(data)} embeddings for {n} inputs", "data")
    slots: list[np.ndarray | None] = [None] * n
    for pos, item in enumerate(data):
        if not isinstance(item, dict) or "embedding" not in item:
            raise _bad(url, f"data[{pos}] has no 'embedding'", "data")
        index = item.get("index", pos)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n \
                or slots[index] is not None:
            raise _bad(url, f"data[{pos}].index is {index!r}: not a distinct position "
                       f"0..{n - 1}", "data")
        slots[index] = _vector(item["embedding"], url, f"data[{pos}].embedding",
                               encoding_format)
    model = body.get("model")
    return _stack([s for s in slots if s is not None], url), (
        model if isinstance(model, str) else None)


def parse_tei_reply(body: Any, n: int, url: str) -> np.ndarray:
    """Vectors from a TEI ``/embed`` reply (a list of lists of floats)."""
    if not isinstance(body, list):
        raise _bad(url, f"the reply is a {type(body).__name__}, not a list of vectors")
    if len(body) != n:
        raise _bad(url, f"{len(body)} embeddings for {n} inputs")
    return _stack([_vector(v, url, f"item {i}", "float") for i, v in enumerate(body)], url)


_RERANK_FIX = ("the server must answer one finite number per document sent, each at a "
               "distinct index 0..n-1 (TEI /rerank: a list of {index, score}; /v1/rerank: "
               "{results: [{index, relevance_score}]}; vLLM /score: {data: [{index, score}]}); "
               "check that http.url and the backend point at a reranker server of that API")
RERANK_SHAPES = {"tei": (None, "score"), "rerank-api": ("results", "relevance_score"),
                 "score": ("data", "score")}
"""Per API style: the key holding the items (``None``: the reply is the list) and the
key of each item's score."""


def _rerank_bad(url: str, n: int, what: str, field: str) -> InputError:
    sent = f"1 query and {n} document{'' if n == 1 else 's'}"
    return InputError(message=f"{url} sent a malformed rerank reply to {sent}: {what}",
                      field=field, fix=_RERANK_FIX)


def _rerank_score(item: Any, where: str, score_key: str, url: str, n: int) -> float:
    if not isinstance(item, dict):
        raise _rerank_bad(url, n, f"{where} is {type(item).__name__}, not an object", where)
    field = f"{where}.{score_key}"
    if score_key not in item:
        raise _rerank_bad(url, n, f"{where} has no '{score_key}'", field)
    value = item[score_key]
    if isinstance(value, bool) or not isinstance(value, int | float):
        shown = "null" if value is None else f"{str(value)[:40]!r}"
        raise _rerank_bad(url, n, f"{field} is {shown} ({type(value).__name__}), not a "
                          "number", field)
    try:
        score = float(value)
    except OverflowError:  # an int beyond float range
        score = math.inf
    if not math.isfinite(score):
        raise _rerank_bad(url, n, f"{field} is {value!r}, not a finite number", field)
    return score


def parse_rerank_reply(body: Any, n: int, url: str, style: str) -> np.ndarray:
    """Scores in request order (NaN where the reply had no item: the caller names a short
    answer) from a rerank reply of API ``style`` to ``n`` documents."""
    key, score_key = RERANK_SHAPES[style]
    items = body
    if key is not None:
        if not isinstance(body, dict):
            raise _rerank_bad(url, n, f"the reply is {type(body).__name__}, not a JSON "
                              "object", "reply")
        items = body.get(key)
    if not isinstance(items, list):
        raise _rerank_bad(url, n, f"'{key or 'reply'}' is {type(items).__name__}, not a "
                          "list", key or "reply")
    scores = np.full(n, np.nan)
    seen = np.zeros(n, dtype=bool)
    for pos, item in enumerate(items):
        where = f"{key}[{pos}]" if key else f"[{pos}]"
        index = item.get("index") if isinstance(item, dict) else None
        score = _rerank_score(item, where, score_key, url, n)
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n \
                or seen[index]:
            raise _rerank_bad(url, n, f"{where}.index is {index!r}: not a distinct position "
                              f"0..{n - 1} of the documents sent", f"{where}.index")
        scores[index], seen[index] = score, True
    return scores
