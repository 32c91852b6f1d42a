"""Output-vector quantization: int8 calibration arithmetic, binary packing, records."""

from __future__ import annotations

import numpy as np
import pytest

from evalq.retrieve.vectorquant import (
    VectorSpec,
    calibrate_int8,
    dequantize_int8,
    quantize_binary,
    quantize_documents,
    quantize_int8,
    unpack_signs,
)


def test_int8_minmax_uses_all_levels_and_round_trips_within_half_a_step() -> None:
    rng = np.random.default_rng(0)
    docs = rng.normal(size=(500, 16)).astype(np.float32) * rng.uniform(0.1, 3, size=16)
    ranges = calibrate_int8(docs)
    codes = quantize_int8(docs, ranges)
    assert codes.dtype == np.int8
    assert (codes.min(axis=0) == -128).all() and (codes.max(axis=0) == 127).all()
    error = np.abs(dequantize_int8(codes, ranges) - docs)
    assert (error <= ranges.step / 2 + 1e-6).all()


def test_int8_out_of_range_queries_saturate_instead_of_wrapping() -> None:
    docs = np.array([[0.0, -1.0], [1.0, 1.0]], dtype=np.float32)
    ranges = calibrate_int8(docs)
    codes = quantize_int8(np.array([[5.0, -5.0]], dtype=np.float32), ranges)
    assert codes.tolist() == [[127, -128]]


def test_int8_constant_dimension_is_kept() -> None:
    docs = np.array([[0.5, 1.0], [0.5, 2.0]], dtype=np.float32)
    ranges = calibrate_int8(docs)
    deq = dequantize_int8(quantize_int8(docs, ranges), ranges)
    np.testing.assert_allclose(deq[:, 0], 0.5, atol=1e-5)


def test_int8_noise_dimension_does_not_fill_the_code_range() -> None:
    # Like MiniLM's near-constant dimensions: spread ~1e-32 is rounding noise, not signal.
    rng = np.random.default_rng(0)
    docs = rng.normal(size=(100, 3)).astype(np.float32)
    docs[:, 1] = rng.normal(size=100).astype(np.float32) * 1e-32
    ranges = calibrate_int8(docs)
    query = np.array([[0.0, 5e-32, 0.0]], dtype=np.float32)
    assert abs(int(quantize_int8(query, ranges)[0, 1])) <= 1
    assert np.abs(quantize_int8(docs, ranges)[:, 1].astype(int)).max() <= 1


def test_percentile_calibration_ignores_an_outlier() -> None:
    rng = np.random.default_rng(1)
    docs = rng.normal(size=(2000, 4)).astype(np.float32)
    docs[0, 0] = 100.0
    minmax = calibrate_int8(docs)
    pct = calibrate_int8(docs, calibration="percentile", percentile=99.5)
    assert minmax.high[0] == 100.0
    assert pct.high[0] < 4.0


def test_binary_packs_sign_bits() -> None:
    vecs = np.array([[0.3, -0.1, 0.0, 2.0, -1.0, 1.0, 1.0, -2.0, 0.5]], dtype=np.float32)
    codes = quantize_binary(vecs)
    assert codes.shape == (1, 2) and codes.dtype == np.uint8
    signs = unpack_signs(codes, 9)
    assert signs.tolist() == [[1, -1, -1, 1, -1, 1, 1, -1, 1]]


def test_stored_vectors_gathers_any_index_shape() -> None:
    rng = np.random.default_rng(2)
    docs = rng.normal(size=(10, 12)).astype(np.float32)
    stored = quantize_documents(docs, VectorSpec(quantize="int8"))
    got = stored.stored_vectors(np.array([[1, 2], [3, 9]]))
    assert got.shape == (2, 2, 12)
    np.testing.assert_allclose(got[1, 1], docs[9], atol=float(stored.ranges.step.max()))
    assert stored.nbytes == 10 * 12


def test_record_and_bytes_per_vector() -> None:
    assert VectorSpec().bytes_per_vector(384) == 1536
    assert VectorSpec(quantize="int8").bytes_per_vector(384) == 384
    binary = VectorSpec(quantize="binary", rescore=10).record(384)
    assert binary["bytes_per_vector"] == 48 and binary["compression"] == 32.0
    assert binary["rescoring"] is not None
    int8 = VectorSpec(quantize="int8").record(384)
    assert int8["calibration"] == "minmax" and int8["rescoring"] is None


@pytest.mark.parametrize(
    "kwargs",
    [dict(quantize="int4"), dict(quantize="int8", rescore=0), dict(rescore=4),
     dict(quantize="int8", calibration="mean"), dict(quantize="int8", percentile=20.0)],
)
def test_invalid_specs_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        VectorSpec(**kwargs)
