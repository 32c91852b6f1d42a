"""Fault class "a database search setting beyond what the server takes" (issue 32):
``ivfflat.probes`` above pgvector's 32768 (set directly or in a sweep) and a ``rerank``
beyond PostgreSQL's bigint LIMIT passed the recipe and failed on the server's SET or
query after the table was loaded, as an exit 3 (the SET's DataError was not the
OperationalError the kind names). A Qdrant ``timeout`` of 10**12 s failed every request
in the socket layer, reported as a server that did not answer. They are refused at plan
time, naming the field.

Two multipliers of every query's work are bounded below what the server takes, at what
no search needs: pgvector's bit ``rerank`` at 100,000 candidates and Qdrant's
``oversampling`` at 1000 × the limit. 10**12 of either planned, and the run re-ranked or
rescored the whole collection without a word; the refusal says what to use instead."""

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
    assert any(limit in result.err for limit in ("32768", "100000", "86400"))


QDRANT_CODES: dict[str, Any] = {"kind": "qdrant", "quantization_config": {
    "scalar": {"type": "int8"}}}
PAST_ANY_USE = {
    "rerank": ({**PG, "vector_type": "bit", "iterative_scan": "relaxed_order",
                "rerank": 10**12}, "candidates.0.index.rerank", "at most 100000", 100_000),
    "oversampling": ({**QDRANT_CODES, "search_params": {"quantization": {
        "oversampling": 1e12}}}, "candidates.0.index.search_params.quantization.oversampling",
        "at most 1000", 1000),
    "swept oversampling": ({**QDRANT_CODES, "sweep": {"oversampling": [2, 1e12]}},
                           "candidates.0.index", "at most 1000", None),
}


@pytest.mark.parametrize("case", list(PAST_ANY_USE))
def test_a_multiplier_past_any_use_is_refused_saying_what_to_use(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    index, field, words, bound = PAST_ANY_USE[case]
    path = write_recipe(tmp_path, candidates=[{"name": "db", "index": index}])
    result = run_cli(capsys, "validate", str(path))
    assert result.code == 2, result.err
    assert no_traceback(result.err) and f"field '{field}" in result.err, result.err
    assert words in result.err and "Fix:" in result.err, result.err
    if bound is not None:  # the bound itself is accepted
        name = field.rsplit(".", 1)[-1]
        at = ({**index, name: bound} if name == "rerank" else {**index, "search_params": {
            "quantization": {"oversampling": bound}}})
        path = write_recipe(tmp_path, candidates=[{"name": "db", "index": at}])
        assert run_cli(capsys, "validate", str(path)).code == 0


def test_quantized_search_settings_over_unquantized_vectors_are_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``search_params.quantization`` (rescore, oversampling) without a
    ``quantization_config``: Qdrant takes it and does nothing, so a variant named for its
    rescored search ran a plain one, without a word."""
    index = {"kind": "qdrant", "search_params": {"quantization": {"rescore": True,
                                                                  "oversampling": 4.0}}}
    path = write_recipe(tmp_path, candidates=[{"name": "db", "index": index}])
    result = run_cli(capsys, "validate", str(path))
    assert result.code == 2 and no_traceback(result.err), result.err
    assert "candidates.0.index" in result.err and "quantization_config" in result.err
    assert "stores none" in result.err
    path = write_recipe(tmp_path, candidates=[{"name": "db", "index": {
        **index, **QDRANT_CODES}}])
    assert run_cli(capsys, "validate", str(path)).code == 0
