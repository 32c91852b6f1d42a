"""The key a database kind stores one corpus's vectors under (issue 30, "cached and
resumable").

Loading a corpus into a database and building its index is the slow part of a database
run, and the part an interrupted run loses. So a table (pgvector) or shard (Qdrant) is
named by what it holds: the documents' ids and vector bytes, and the options that shape
the stored data and its index (vector type, ``m``, ``ef_construction``, ``lists``,
``quantization_config`` ...; never the search-time ones, which one stored index serves
at any value). A rerun with the same key finds the table complete and reuses it (no
ingest, no index build); one that finds it incomplete adds only the rows it lacks, then
builds the index. Changed vectors or changed build options are another key, so a stale
table is never searched.

A row's id inside the table is the document's place in the keyed corpus (its place in
trec_eval's tie order for pgvector, its position for Qdrant): the key fixes the ids and
their order, so the same document has the same row id in every run of that key, and a
resumed ingest can tell which documents are already there.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

_FORMAT = "evalq-vdb-1"  # bumped when what a key stores changes meaning


def vectors_key(kind: str, ids: Sequence[str], vectors: np.ndarray,
                build: Mapping[str, Any]) -> str:
    """A hex digest of ``kind``, the ids in order, the float32 vectors' shape and bytes,
    and the build-time options ``build`` (JSON, keys sorted)."""
    array = np.ascontiguousarray(vectors, dtype=np.float32)
    digest = hashlib.sha256()
    digest.update(json.dumps([_FORMAT, kind, list(array.shape), dict(build)],
                             sort_keys=True, default=str).encode())
    for doc_id in ids:
        digest.update(doc_id.encode("utf-8") + b"\0")
    digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()


@dataclass(frozen=True)
class CacheUse:
    """What a build found under its key: nothing (``resumed`` 0, not ``reused``), an
    interrupted ingest it completed (``resumed``: the rows already there), or a complete
    table or shard it searched as it was (``reused``)."""

    key: str
    reused: bool
    resumed: int
    rows: int  # the corpus's

    def record(self) -> dict[str, Any]:
        """The index record's part (flat, beside the kind's costs): ``rows_loaded`` is
        what this build ingested (0 when reused)."""
        return {"cache_key": self.key, "reused": self.reused, "rows_resumed": self.resumed,
                "rows_loaded": 0 if self.reused else self.rows - self.resumed}


def build_options(options: Any, names: Sequence[str]) -> dict[str, Any]:
    """The build-time options ``names`` of a kind's options model, as its key reads them."""
    dumped = options.model_dump()
    return {name: dumped[name] for name in names}
