"""Fault class "a cache key made of a failure": ``server_identity`` turned any failure to
read a server's self-report into ``{"unavailable": "<ExceptionName>"}`` inside the cache
key, so a transient error gave a new key (and new vectors cached under it) and two
different servers that both failed shared one report. A failure to reach the server now
raises; a server that answered without a report (an older server without the route) is
keyed by that answer and its probe vector, which tells two such servers apart.
"""

from __future__ import annotations

import numpy as np
import pytest

from evalq.core.errors import BackendUnavailableError, InputError
from evalq.engines.server_identity import server_identity


def _probe(seed: int):
    return lambda: np.random.default_rng(seed).standard_normal(8).astype(np.float32)


def _raises(exc: Exception):
    def report():
        raise exc
    return report


@pytest.mark.parametrize("exc", [
    BackendUnavailableError("http://127.0.0.1:9/v1/models stopped answering"),
    InputError(message="cannot reach http://127.0.0.1:9/v1/models", field="url"),
], ids=["stopped answering", "never reached"])
def test_a_server_that_did_not_answer_makes_no_identity(tmp_path, exc) -> None:
    with pytest.raises(type(exc)):
        server_identity("openai|u|m", _raises(exc), _probe(0), tmp_path)


def test_servers_without_the_route_are_told_apart_by_their_probe(tmp_path) -> None:
    missing = InputError(message="no route /v1/models", field="http.route")
    one = server_identity("openai|u|m", _raises(missing), _probe(1), tmp_path)
    other = server_identity("openai|u|m", _raises(missing), _probe(2), tmp_path)
    again = server_identity("openai|u|m", _raises(missing), _probe(1), tmp_path)
    assert one["report"] == {"no_report": "http.route"}
    assert one != other and one == again
    assert "unavailable" not in str(one)


def test_a_report_is_still_keyed_without_volatile_fields(tmp_path) -> None:
    first = server_identity("k", lambda: {"data": [{"id": "m", "created": 1}]}, _probe(3),
                            tmp_path)
    second = server_identity("k", lambda: {"data": [{"id": "m", "created": 2}]}, _probe(3),
                             tmp_path)
    assert first == second and first["report"] == {"data": [{"id": "m"}]}
