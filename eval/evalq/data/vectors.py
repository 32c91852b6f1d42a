"""Corpus vectors as sharded on-disk ``.npy`` arrays, memory-mapped for search.

A corpus larger than memory cannot hold its (n, dim) float32 matrix in one process:
MS MARCO's 8.8M passages are 13.5 GB at 384 dimensions. :class:`ShardWriter` appends
encoded blocks and cuts them into shards of ``shard_rows`` rows, each written atomically
(temp file + rename) as a plain ``.npy`` file any tool can read; ``layout.json`` lists
the shards once they are all written. :func:`open_shards` memory-maps them read-only, so
searching (:func:`evalq.retrieve.shards.search_shards`) touches one shard at a time and
:func:`release_pages` drops a searched shard's pages from this process's resident set
(they count in RSS while mapped, and the kernel only evicts them under pressure, so
without it RSS after a search grows by every vector read).
"""

from __future__ import annotations

import json
import mmap
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evalq.core import atomicio

LAYOUT = "layout.json"


@dataclass(frozen=True)
class ShardLayout:
    files: tuple[str, ...]
    rows: tuple[int, ...]
    dim: int

    @property
    def total(self) -> int:
        return sum(self.rows)


class ShardWriter:
    """Appends (rows, dim) float32 blocks; holds at most one shard in memory."""

    def __init__(self, root: str | Path, *, shard_rows: int = 100_000) -> None:
        if shard_rows < 1:
            raise ValueError("shard_rows must be at least 1")
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.shard_rows = shard_rows
        self._pending: list[np.ndarray] = []
        self._pending_rows = 0
        self._files: list[str] = []
        self._rows: list[int] = []
        self._dim: int | None = None

    def append(self, block: np.ndarray) -> None:
        block = np.ascontiguousarray(block, dtype=np.float32)
        if block.ndim != 2:
            raise ValueError(f"blocks must be (rows, dim) matrices, got {block.shape}")
        if self._dim is None:
            self._dim = int(block.shape[1])
        elif block.shape[1] != self._dim:
            raise ValueError(f"block is {block.shape[1]} wide, earlier blocks {self._dim}")
        while len(block):
            take = min(len(block), self.shard_rows - self._pending_rows)
            self._pending.append(block[:take])
            self._pending_rows += take
            block = block[take:]
            if self._pending_rows == self.shard_rows:
                self._flush()

    def close(self) -> ShardLayout:
        """Write the last partial shard and the layout; returns the layout."""
        if self._pending_rows:
            self._flush()
        layout = ShardLayout(tuple(self._files), tuple(self._rows), self._dim or 0)
        atomicio.write_json(self.root / LAYOUT, {"files": list(layout.files),
                                                 "rows": list(layout.rows), "dim": layout.dim})
        return layout

    def _flush(self) -> None:
        name = f"shard-{len(self._files):05d}.npy"
        tmp = self.root / f".{name}.tmp"
        try:
            with open(tmp, "wb") as fh:
                np.save(fh, np.concatenate(self._pending, axis=0), allow_pickle=False)
                fh.flush()
                os.fsync(fh.fileno())
        except OSError as exc:  # a full disk: say which shard, not just ENOSPC
            tmp.unlink(missing_ok=True)
            raise atomicio.named(exc, self.root / name) from exc
        tmp.replace(self.root / name)
        self._files.append(name)
        self._rows.append(self._pending_rows)
        self._pending, self._pending_rows = [], 0


def open_shards(root: str | Path) -> tuple[ShardLayout, list[np.ndarray]]:
    """The layout and each shard memory-mapped read-only (``np.memmap`` views)."""
    root = Path(root)
    data = json.loads((root / LAYOUT).read_text(encoding="utf-8"))
    layout = ShardLayout(tuple(data["files"]), tuple(data["rows"]), int(data["dim"]))
    shards = [np.load(root / f, mmap_mode="r", allow_pickle=False) for f in layout.files]
    for f, n, s in zip(layout.files, layout.rows, shards):
        if s.shape != (n, layout.dim) or s.dtype != np.float32:
            raise ValueError(f"{root / f} holds {s.shape} {s.dtype}, layout says ({n}, "
                             f"{layout.dim}) float32")
    return layout, shards


def release_pages(shard: np.ndarray) -> bool:
    """Drop a memory-mapped shard's pages from this process's resident set.

    ``MADV_DONTNEED`` on a read-only file mapping only unmaps the pages: a later read
    fetches them again from the page cache or the file, with the same bytes. ``False``
    (nothing done) for an in-memory array or where ``madvise`` is unavailable."""
    base: object = shard
    while isinstance(base, np.ndarray) and getattr(base, "_mmap", None) is None:
        base = base.base
    handle = base if isinstance(base, mmap.mmap) else getattr(base, "_mmap", None)
    advise = getattr(handle, "madvise", None)
    flag = getattr(mmap, "MADV_DONTNEED", None)
    if advise is None or flag is None:
        return False
    advise(flag)
    return True
