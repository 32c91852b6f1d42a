"""On-disk embedding cache: content-addressed ``.npy`` chunks.

Encoding is the slow step of a run; everything after it is cheap. The cache lets a
rerun skip every chunk whose inputs did not change (same model weights, quantization,
settings, role prefix and texts — all folded into the key by :mod:`evalq.encode.batching`) and
lets an interrupted run resume at the last finished chunk.

Files are written atomically (temp file + rename), so a killed process leaves either a
whole chunk or none. Each file ends with a SHA-256 of its contents, verified on every
read: a flipped bit, a truncated or hand-edited file, the wrong shape or dtype, or a
vector with NaN/Inf is treated as missing, reported with a warning and overwritten by the
recomputed chunk: a corrupt cache costs time, never correctness. Invalid vectors (NaN,
Inf, all-zero rows) are refused by :meth:`EmbeddingCache.put`, so they are never stored.
"""

from __future__ import annotations

import hashlib
import io
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evalq.core import atomicio
from evalq.core.values import vector_problem

DEFAULT_ROOT = Path(".evalq-cache/embeddings")

_KEY = re.compile(r"^[0-9a-f]{16,128}$")
# Trailer after the .npy payload: magic + SHA-256 of the payload. np.load stops at the
# payload's end, so the files stay readable by plain numpy.
_MAGIC = b"EVALQSUM"
_TRAILER = len(_MAGIC) + 32


@dataclass(frozen=True)
class CacheStats:
    """Counters since this cache object was created (not over the folder's lifetime)."""

    hits: int
    misses: int
    corrupt: int
    writes: int
    bytes_written: int


@dataclass(frozen=True)
class CacheSize:
    """What the folder holds now."""

    files: int
    bytes: int


class EmbeddingCache:
    """Maps a hex key to a float32 matrix, stored as ``root/<key[:2]>/<key>.npy``.

    The two-character fan-out keeps folders small when a corpus has many chunks.
    """

    def __init__(self, root: str | Path = DEFAULT_ROOT) -> None:
        self.root = Path(root)
        self._hits = 0
        self._misses = 0
        self._corrupt = 0
        self._writes = 0
        self._bytes_written = 0

    def path(self, key: str) -> Path:
        if not _KEY.match(key):
            raise ValueError(f"cache keys are lowercase hex digests, got {key!r}")
        return self.root / key[:2] / f"{key}.npy"

    def get(
        self, key: str, *, rows: int | None = None, dim: int | None = None
    ) -> np.ndarray | None:
        """The stored matrix, or ``None`` when absent or invalid.

        ``rows`` / ``dim``, when given, must match: the caller knows how many texts the
        chunk holds and, after the first chunk, the embedding width.
        """
        path = self.path(key)
        if not path.exists():
            self._misses += 1
            return None
        try:
            data = path.read_bytes()
        except OSError as exc:
            return self._reject(path, f"unreadable ({exc})")
        payload, trailer = data[:-_TRAILER], data[-_TRAILER:]
        if len(data) < _TRAILER or not trailer.startswith(_MAGIC):
            return self._reject(path, "without a checksum (truncated, or written by an "
                                "older evalq)")
        if hashlib.sha256(payload).digest() != trailer[len(_MAGIC):]:
            return self._reject(path, "failing its checksum (the file changed on disk)")
        try:
            array = np.load(io.BytesIO(payload), allow_pickle=False)
        except (OSError, ValueError, EOFError) as exc:
            return self._reject(path, f"unreadable ({exc})")
        problem = _validate(array, rows=rows, dim=dim) or vector_problem(array)
        if problem is not None:
            return self._reject(path, problem)
        self._hits += 1
        return array

    def put(self, key: str, array: np.ndarray) -> None:
        """Store ``array`` (2-D float32) atomically, replacing whatever was there."""
        problem = _validate(array, rows=None, dim=None) or vector_problem(array)
        if problem is not None:
            raise ValueError(f"refusing to cache an embedding chunk that is {problem}")
        buffer = io.BytesIO()
        np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
        payload = buffer.getvalue()
        data = payload + _MAGIC + hashlib.sha256(payload).digest()
        atomicio.write_bytes(self.path(key), data)
        self._writes += 1
        self._bytes_written += len(data)

    def __contains__(self, key: str) -> bool:
        return self.path(key).exists()

    def stats(self) -> CacheStats:
        return CacheStats(
            hits=self._hits,
            misses=self._misses,
            corrupt=self._corrupt,
            writes=self._writes,
            bytes_written=self._bytes_written,
        )

    def size(self) -> CacheSize:
        files = [p for p in self.root.glob("*/*.npy") if p.is_file()]
        return CacheSize(files=len(files), bytes=sum(p.stat().st_size for p in files))

    def _reject(self, path: Path, problem: str) -> None:
        self._corrupt += 1
        self._misses += 1
        warnings.warn(
            f"embedding cache file {path} is {problem}; recomputing it and overwriting the file",
            RuntimeWarning,
            stacklevel=3,
        )
        return None


def _validate(array: np.ndarray, *, rows: int | None, dim: int | None) -> str | None:
    if array.dtype != np.float32:
        return f"of dtype {array.dtype}, not float32"
    if array.ndim != 2:
        return f"{array.ndim}-dimensional, not a matrix"
    if rows is not None and array.shape[0] != rows:
        return f"holding {array.shape[0]} rows where {rows} were expected"
    if dim is not None and array.shape[1] != dim:
        return f"{array.shape[1]} wide where {dim} was expected"
    return None
