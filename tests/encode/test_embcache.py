"""EmbeddingCache: round trip, atomic layout, validation of what it loads."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from evalq.encode.cache import EmbeddingCache


def key(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def test_round_trip_and_stats(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert cache.get(key("a")) is None
    cache.put(key("a"), data)
    assert key("a") in cache
    np.testing.assert_array_equal(cache.get(key("a"), rows=3, dim=4), data)
    stats = cache.stats()
    assert (stats.hits, stats.misses, stats.writes, stats.corrupt) == (1, 1, 1, 0)
    size = cache.size()
    assert size.files == 1 and size.bytes == stats.bytes_written > data.nbytes
    assert not list(tmp_path.rglob("*.tmp"))  # atomic write left no temp file


@pytest.mark.parametrize(
    ("stored", "rows", "dim"),
    [
        (np.zeros((3, 4), dtype=np.float64), None, None),  # wrong dtype
        (np.zeros(4, dtype=np.float32), None, None),  # not a matrix
        (np.zeros((3, 4), dtype=np.float32), 2, None),  # wrong row count
        (np.zeros((3, 4), dtype=np.float32), 3, 5),  # wrong width
    ],
)
def test_invalid_files_are_misses_with_a_warning(
    tmp_path: Path, stored: np.ndarray, rows: int | None, dim: int | None
) -> None:
    cache = EmbeddingCache(tmp_path)
    path = cache.path(key("x"))
    path.parent.mkdir(parents=True)
    np.save(path, stored)
    with pytest.warns(RuntimeWarning, match="recomputing"):
        assert cache.get(key("x"), rows=rows, dim=dim) is None
    assert cache.stats().corrupt == 1


def test_truncated_file_is_a_miss_then_overwritten(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    cache.put(key("t"), np.ones((5, 3), dtype=np.float32))
    path = cache.path(key("t"))
    path.write_bytes(path.read_bytes()[:40])
    with pytest.warns(RuntimeWarning):
        assert cache.get(key("t")) is None
    cache.put(key("t"), np.full((5, 3), 2.0, dtype=np.float32))
    np.testing.assert_array_equal(cache.get(key("t")), np.full((5, 3), 2.0, dtype=np.float32))


def test_refuses_bad_keys_and_arrays(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    with pytest.raises(ValueError, match="hex"):
        cache.path("../escape")
    with pytest.raises(ValueError, match="float32"):
        cache.put(key("b"), np.zeros((2, 2), dtype=np.float16))
