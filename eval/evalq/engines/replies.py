"""Parsing embedding replies from servers: anything malformed is the server's fault.

A server that answers with the wrong shape (``data`` not a list, an item without
``embedding``, strings where floats belong, vectors of different lengths, the wrong count)
is a user-side fault (exit 2) named by URL and field, never a traceback. NaN, Inf and
all-zero vectors parse here and are refused by ``encode.py``, which can name the chunk.
"""

from __future__ import annotations

import base64
import binascii
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
