"""Fault class "a database search setting beyond what the server takes" (issue 32):
``ivfflat.probes`` above pgvector's 32768 (set directly or in a sweep) and a ``rerank``
beyond PostgreSQL's bigint LIMIT passed the recipe and failed on the server's SET or
query after the table was loaded, as an exit 3 (the SET's DataError was not the
OperationalError the kind names). A Qdrant ``timeout`` of 10**12 s failed every request
in the socket layer, reported as a server that did not answer. They are refused at plan
time, naming the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from faultkit import no_traceback, run_cli, write_recipe

PG: dict[str, Any] = {"kind": "pgvector", "data_dir": "/nonexistent-evalq-pg"}

CASES = {
    "probes": ({**PG, "index": "ivfflat", "lists": 4, "probes": 40000}, "probes"),
    "swept probes": ({**PG, "index": "ivfflat", "lists": 4,
                      "sweep": {"probes": [1, 40000]}}, "sweep"),
    "rerank": ({**PG, "index": "ivfflat", "vector_type": "bit", "rerank": 2**63}, "rerank"),
    "qdrant timeout": ({"kind": "qdrant", "url": "http://127.0.0.1:9", "timeout": 10**12},
                       "timeout"),
    "qdrant index wait": ({"kind": "qdrant", "url": "http://127.0.0.1:9",
                           "index_wait_s": 1e300}, "index_wait_s"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_setting_the_server_refuses_is_refused_at_plan_time(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    index, field = CASES[case]
    path = write_recipe(tmp_path, candidates=[{"name": "db", "index": index}])
    result = run_cli(capsys, "validate", str(path))
    assert result.code == 2, result.err
    assert no_traceback(result.err) and str(path) in result.err
    assert f"candidates.0.index.{field}" in result.err or f"{field}" in result.err
    assert any(limit in result.err for limit in ("32768", "9223372036854775807", "86400"))
