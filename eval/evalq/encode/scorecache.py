"""Reranker score cache: one float per (reranker fingerprint, query, document).

A cross-encoder's cost is per pair, so a pipeline interrupted after an hour of scoring
must not score those pairs again. Scores are kept in SQLite (stdlib, transactional): a
chunk of pairs is committed as soon as it is scored, so a kill loses at most the chunk in
flight, and a rerun reads every committed pair back. The key hashes the reranker's
fingerprint (weights, quantization, dtype, activation, truncation: everything that
changes a score), the query text and the document text, length-prefixed so no two pairs
can collide by concatenation. Non-finite scores are never stored.

Like the embedding cache, a corrupt cache costs time, never correctness: every stored
score carries a SHA-256 of its key and value, verified on every read, so a score edited
inside ``scores.sqlite`` is treated as missing and recomputed; a file SQLite cannot read
(truncated, random bytes) is moved aside and rebuilt. Both are reported with one warning
naming the file.
"""

from __future__ import annotations

import hashlib
import math
import sqlite3
import struct
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path

_KEY_FORMAT = b"evalq-rerank-score-v1"
_LOOKUP_BATCH = 500
# Rows of evalq before checksums live in table ``scores``; they are never read (unverified).
_TABLE = "scores_v2"
# Past the top of any call stack: the warning is one line ("sys:1: RuntimeWarning: ..."),
# not a line of evalq's source.
_WARN_STACKLEVEL = 10_000


def pair_key(fingerprint: str, query: str, document: str) -> bytes:
    digest = hashlib.sha256(_KEY_FORMAT)
    for part in (fingerprint, query, document):
        data = part.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.digest()


def _checksum(key: bytes, score: float) -> bytes:
    return hashlib.sha256(key + struct.pack("<d", score)).digest()[:16]


class ScoreCache:
    def __init__(self, root: str | Path) -> None:
        self.path = Path(root) / "scores.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.corrupt = 0  # scores that failed their checksum, since this object was made
        try:
            self._db = self._open()
        except sqlite3.DatabaseError as exc:
            self._db = self._rebuild(exc)

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(str(self.path), timeout=60)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(f"CREATE TABLE IF NOT EXISTS {_TABLE} (key BLOB PRIMARY KEY, "
                       "score REAL NOT NULL, checksum BLOB NOT NULL) WITHOUT ROWID")
            db.commit()
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def _rebuild(self, exc: sqlite3.DatabaseError) -> sqlite3.Connection:
        """Move the unreadable file aside (kept for a post-mortem) and start an empty one."""
        if getattr(self, "_db", None) is not None:
            self._db.close()
        aside = self.path.with_name(self.path.name + ".corrupt")
        if self.path.exists():
            self.path.replace(aside)
        for suffix in ("-wal", "-shm"):
            self.path.with_name(self.path.name + suffix).unlink(missing_ok=True)
        warnings.warn(f"reranker score cache {self.path} is unreadable ({exc}); moved it to "
                      f"{aside.name} and recomputing its scores", RuntimeWarning,
                      stacklevel=_WARN_STACKLEVEL)
        return self._open()

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, float]:
        try:
            return self._get_many(keys)
        except sqlite3.DatabaseError as exc:
            self._db = self._rebuild(exc)
            return {}

    def _get_many(self, keys: Sequence[bytes]) -> dict[bytes, float]:
        found: dict[bytes, float] = {}
        bad = 0
        for start in range(0, len(keys), _LOOKUP_BATCH):
            part = list(keys[start:start + _LOOKUP_BATCH])
            marks = ",".join("?" * len(part))
            rows = self._db.execute(
                f"SELECT key, score, checksum FROM {_TABLE} WHERE key IN ({marks})", part)
            for key, score, checksum in rows:
                key = bytes(key)
                if isinstance(score, (int, float)) and math.isfinite(score) and \
                        isinstance(checksum, bytes) and checksum == _checksum(key, float(score)):
                    found[key] = float(score)
                else:
                    bad += 1
        if bad:
            self.corrupt += bad
            warnings.warn(f"reranker score cache {self.path} holds {bad} score(s) failing "
                          "their checksum (the file changed on disk); recomputing them and "
                          "overwriting", RuntimeWarning, stacklevel=_WARN_STACKLEVEL)
        return found

    def put_many(self, items: Iterable[tuple[bytes, float]]) -> None:
        rows = [(k, float(s), _checksum(k, float(s))) for k, s in items
                if math.isfinite(float(s))]
        try:
            self._put(rows)
        except sqlite3.DatabaseError as exc:
            self._db = self._rebuild(exc)
            self._put(rows)

    def _put(self, rows: list[tuple[bytes, float, bytes]]) -> None:
        with self._db:  # one transaction: the chunk is stored whole or not at all
            self._db.executemany(f"INSERT OR REPLACE INTO {_TABLE} VALUES (?, ?, ?)", rows)

    def close(self) -> None:
        self._db.close()
