"""Reranker score cache: one float per (reranker fingerprint, query, document).

A cross-encoder's cost is per pair, so a pipeline interrupted after an hour of scoring
must not score those pairs again. Scores are kept in SQLite (stdlib, transactional): a
chunk of pairs is committed as soon as it is scored, so a kill loses at most the chunk in
flight, and a rerun reads every committed pair back. The key hashes the reranker's
fingerprint (weights, quantization, dtype, activation, truncation: everything that
changes a score), the query text and the document text, length-prefixed so no two pairs
can collide by concatenation. Non-finite scores are never stored.
"""

from __future__ import annotations

import hashlib
import math
import sqlite3
from collections.abc import Iterable, Sequence
from pathlib import Path

_KEY_FORMAT = b"evalq-rerank-score-v1"
_LOOKUP_BATCH = 500


def pair_key(fingerprint: str, query: str, document: str) -> bytes:
    digest = hashlib.sha256(_KEY_FORMAT)
    for part in (fingerprint, query, document):
        data = part.encode("utf-8", "surrogatepass")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.digest()


class ScoreCache:
    def __init__(self, root: str | Path) -> None:
        self.path = Path(root) / "scores.sqlite"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path), timeout=60)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS scores "
                         "(key BLOB PRIMARY KEY, score REAL NOT NULL) WITHOUT ROWID")
        self._db.commit()

    def get_many(self, keys: Sequence[bytes]) -> dict[bytes, float]:
        found: dict[bytes, float] = {}
        for start in range(0, len(keys), _LOOKUP_BATCH):
            part = list(keys[start:start + _LOOKUP_BATCH])
            marks = ",".join("?" * len(part))
            rows = self._db.execute(f"SELECT key, score FROM scores WHERE key IN ({marks})",
                                    part)
            found.update((bytes(k), float(s)) for k, s in rows)
        return found

    def put_many(self, items: Iterable[tuple[bytes, float]]) -> None:
        rows = [(k, float(s)) for k, s in items if math.isfinite(float(s))]
        with self._db:  # one transaction: the chunk is stored whole or not at all
            self._db.executemany("INSERT OR REPLACE INTO scores VALUES (?, ?)", rows)

    def close(self) -> None:
        self._db.close()
