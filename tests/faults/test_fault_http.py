"""Fault class "misbehaving server": malformed replies (mixed dimensions, missing
`embedding`, non-numeric values, `data` not a list, NaN, all-zero vectors) end the
candidate with exit 2 naming the URL, keep the finished reference, cache nothing bad;
an API key echoed in an error body appears nowhere; a redeployed model under the same
URL and name gets new cache keys; Retry-After is honoured."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from faultkit import CannedServer, no_traceback, run_cli, text_vector, write_recipe

from evalq.core.values import EncodingSettings


def _ok(inputs: list[str], version: int = 0) -> dict[str, Any]:
    return {"model": "m", "data": [{"index": i, "embedding": text_vector(t, version=version)}
                                   for i, t in enumerate(inputs)]}


def _mixed(inputs: list[str]) -> dict[str, Any]:
    body = _ok(inputs)
    if len(inputs) > 1:
        body["data"][1]["embedding"] = body["data"][1]["embedding"][:-1]
    return body


def _nan(inputs: list[str]) -> dict[str, Any]:
    body = _ok(inputs)
    if len(inputs) > 1:  # the probe (one text) is fine; the corpus is not
        body["data"][0]["embedding"][5] = math.nan
    return body


def _zero(inputs: list[str]) -> dict[str, Any]:
    body = _ok(inputs)
    if len(inputs) > 1:
        body["data"][0]["embedding"] = [0.0] * 384
    return body


REPLIES = {
    "mixed dimensions": (_mixed, "vectors of different lengths"),
    "missing embedding": (lambda x: {"data": [{"index": i} for i in range(len(x))]},
                          "has no 'embedding'"),
    "non-numeric values": (lambda x: {"data": [{"index": i, "embedding": ["a", "b"]}
                                               for i in range(len(x))]}, "non-numeric value"),
    "data not a list": (lambda x: {"data": {"0": [1.0]}}, "'data' is dict, not a list"),
    "wrong count": (lambda x: _ok(x[:-1]) if len(x) > 1 else _ok(x), "embeddings for"),
    "NaN values": (_nan, "NaN"),
    "all-zero vector": (_zero, "all-zero"),
}


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("http-cache")


@pytest.mark.parametrize("case", list(REPLIES))
def test_malformed_replies_are_refused_and_never_cached(case: str, tmp_path: Path) -> None:
    from evalq.core.errors import InputError
    from evalq.encode.batching import encode_texts
    from evalq.encode.cache import EmbeddingCache
    from evalq.engines.openai_http import OpenAIEncoder

    make, needle = REPLIES[case]
    cache = EmbeddingCache(tmp_path / "embeddings")
    texts = [f"text number {i}" for i in range(6)]
    with CannedServer(lambda inputs, headers: (200, json.dumps(make(inputs)), {})) as server:
        enc = OpenAIEncoder(server.url, "m", settings=EncodingSettings(), retries=0,
                            max_batch=3, probe_store=tmp_path / "servers")
        try:
            with pytest.raises(InputError) as err:
                encode_texts(enc, texts, role="document", cache=cache, chunk_size=3,
                             progress=False)
        finally:
            enc.close()
    assert server.url in str(err.value) and needle in str(err.value), str(err.value)
    assert cache.size().files == 0


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.parametrize("case", ["mixed dimensions", "NaN values"])
def test_malformed_replies_mid_run_are_exit_2_and_keep_the_reference(
        case: str, tmp_path: Path, shared_cache: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    make, needle = REPLIES[case]
    with CannedServer(lambda inputs, headers: (200, json.dumps(make(inputs)), {})) as server:
        recipe = write_recipe(
            tmp_path, cache=shared_cache,
            candidates=[{"name": "remote", "backend": "openai",
                         "http": {"url": server.url, "model": "m", "retries": 0}}])
        before = set((shared_cache / "embeddings").rglob("*.npy"))
        result = run_cli(capsys, "run", str(recipe), folder=tmp_path / "out")
    assert result.code == 2, result.err
    assert no_traceback(result.err)
    assert server.url in result.err and needle in result.err, result.err
    manifest = result.manifest
    assert manifest["status"] == "failed" and list(manifest["variants"]) == ["fp32"]
    assert (tmp_path / "out" / "per_query" / "tiny" / "fp32.jsonl").is_file()  # kept
    encoded = manifest["variants"]["fp32"]["datasets"]["tiny"]["encode"]
    reference_chunks = sum(encoded[r]["chunks_computed"] for r in ("documents", "queries"))
    new = set((shared_cache / "embeddings").rglob("*.npy")) - before
    assert len(new) == reference_chunks  # the reference's, nothing of the server's


SECRET = "sk-evalq-fault-suite-0123456789abcdef"


@pytest.mark.slow
@pytest.mark.model
def test_api_key_echoed_by_the_server_appears_nowhere(
        tmp_path: Path, shared_cache: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EVALQ_FAULT_KEY", SECRET)

    def echo(inputs: list[str], headers: dict[str, str]) -> tuple[int, str, dict[str, str]]:
        return 400, json.dumps({"error": "bad request", "headers": headers,
                                "detail": f"key {SECRET} is not allowed"}), {}

    with CannedServer(echo) as server:
        recipe = write_recipe(
            tmp_path, cache=shared_cache,
            candidates=[{"name": "remote", "backend": "openai",
                         "http": {"url": server.url, "model": "m",
                                  "api_key_env": "EVALQ_FAULT_KEY", "retries": 0}}])
        result = run_cli(capsys, "run", str(recipe), folder=tmp_path / "out")
        sent = server.seen[0][0]
    assert sent.get("Authorization") == f"Bearer {SECRET}"  # it was used
    assert result.code == 2 and "rejected the request" in result.err
    assert SECRET not in result.err and SECRET not in result.out
    for path in (tmp_path / "out").rglob("*"):
        if path.is_file():
            assert SECRET not in path.read_text(errors="replace"), path


def test_redeployed_model_under_the_same_name_gets_new_cache_keys(tmp_path: Path) -> None:
    from evalq.engines.openai_http import OpenAIEncoder

    deployment = {"version": 0}

    def reply(inputs: list[str], headers: dict[str, str]) -> tuple[int, str, dict[str, str]]:
        return 200, json.dumps(_ok(inputs, deployment["version"])), {}

    settings = EncodingSettings()
    models = {"object": "list", "data": [{"id": "m", "created": 1}]}
    with CannedServer(reply, models) as server:
        def fingerprint() -> str:
            enc = OpenAIEncoder(server.url, "m", settings=settings, retries=0,
                                probe_store=tmp_path / "servers")
            try:
                return enc.fingerprint()
            finally:
                enc.close()

        first, same = fingerprint(), fingerprint()
        models["data"][0]["created"] = 2  # volatile fields do not count
        assert fingerprint() == first == same
        deployment["version"] = 1  # same URL, same model name, other weights
        redeployed = fingerprint()
        assert redeployed != first
        deployment["version"] = 0  # rolled back: the old vectors are valid again
        assert fingerprint() == first


def test_retry_after_is_honoured(tmp_path: Path) -> None:
    from evalq.engines.http_common import parse_retry_after
    from evalq.engines.openai_http import OpenAIEncoder

    calls = {"n": 0}

    def busy_once(inputs: list[str], headers: dict[str, str]) -> tuple[int, str, dict[str, str]]:
        calls["n"] += 1
        if calls["n"] == 1:
            return 429, '{"error": "slow down"}', {"Retry-After": "0"}
        return 200, json.dumps(_ok(inputs)), {}

    with CannedServer(busy_once) as server:
        enc = OpenAIEncoder(server.url, "m", settings=EncodingSettings(), retries=1,
                            backoff_s=30.0)  # a 30 s backoff would be used without it
        try:
            vectors = enc.embed(["a", "b"])
        finally:
            enc.close()
    assert vectors.shape == (2, 384) and calls["n"] == 2
    assert parse_retry_after("120") == 60.0 and parse_retry_after("soon") is None
    assert parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0
