"""Parity preflight with real encoders: in-process fp32 (the reference), a mis-set twin
(CLS pooling instead of mean), a quantized twin with identical settings, and vLLM's
engine at float32 — which must agree with in-process to cosine >= 0.9999."""

from __future__ import annotations

import dataclasses
import json

import pytest

from evalq.encode.parity import parity_check, pick_parity_texts
from evalq.engines.inprocess import InProcessEncoder


@pytest.fixture(scope="module")
def parity_texts(mixed_texts):
    return pick_parity_texts(mixed_texts, n=24)


@pytest.fixture(scope="module")
def inprocess(minilm_path, minilm_settings):
    encoder = InProcessEncoder(minilm_path, settings=minilm_settings, dtype="float32")
    yield encoder
    encoder.close()


def test_pick_parity_texts_is_deterministic_and_keeps_the_longest(mixed_texts):
    picked = pick_parity_texts(mixed_texts, n=24)
    assert picked == pick_parity_texts(list(reversed(mixed_texts)), n=24)
    assert len(picked) == 24 and len(set(picked)) == 24
    longest = sorted(set(mixed_texts), key=len, reverse=True)[:12]
    assert set(longest) <= set(picked)


@pytest.mark.model
def test_mismatched_setting_is_named(minilm_path, minilm_settings, inprocess, parity_texts):
    cls_settings = dataclasses.replace(minilm_settings, pooling="cls")
    twin = InProcessEncoder(minilm_path, settings=cls_settings, dtype="float32")
    try:
        report = parity_check({"ref": inprocess, "cls": twin}, "ref", parity_texts)
    finally:
        twin.close()
    assert not report.ok
    (result,) = report.failures
    assert result.differences == {"pooling": ("cls", "mean")}
    assert "pooling" in result.reason and result.min_cosine < 0.99
    assert result.settings_fingerprint != minilm_settings.fingerprint()
    json.dumps(report.as_dict())  # the report goes into results as JSON
    assert any("FAIL cls" in line for line in report.summary_lines())


@pytest.mark.model
def test_identical_settings_but_different_weights_blame_the_engine(
    minilm_path, minilm_settings, inprocess, parity_texts
):
    int8 = InProcessEncoder(minilm_path, settings=minilm_settings, dtype="float32",
                            quantization={"method": "torch-dynamic-int8"})
    try:
        report = parity_check({"ref": inprocess, "int8": int8}, "ref", parity_texts)
    finally:
        int8.close()
    (result,) = report.results
    assert not result.passed and result.differences == {}
    assert "identical encoding settings" in result.reason
    assert 0.8 < result.mean_cosine < 0.9999


@pytest.mark.vllm
def test_vllm_engine_fp32_agrees_with_inprocess(inprocess, vllm_engine, parity_texts):
    report = parity_check({"inprocess": inprocess, "vllm": vllm_engine}, "inprocess",
                          parity_texts)
    (result,) = report.results
    assert report.ok, report.summary_lines()
    assert result.min_cosine >= 0.9999 and result.differences == {}
    # Some texts were longer than max_length, so truncation took part in the comparison.
    assert max(vllm_engine.token_lengths(parity_texts)) == vllm_engine.settings.max_length
