"""Fault class "a kept Qdrant shard is damaged" (issue 32): the shard a run keeps under its
key (``path``, by default the cache's ``vdb/qdrant-edge-<version>``) with a file cut
short or overwritten (a full disk, a write killed). The next run of that key loaded it,
and qdrant-edge's bare ``Exception`` ('Failed to deserialize ...') went through as an
exit 3. It is refused naming the shard's folder, ``<index>.path`` and the folder to
delete, which the rerun builds again."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from evalq.core.errors import InputError
from evalq.retrieve.kinds import Documents
from evalq.retrieve.qdrant_options import QdrantOptions
from evalq.retrieve.registry import INDEX_KINDS

pytestmark = pytest.mark.server


@pytest.mark.parametrize("damaged", ["shard/edge_config.json", "shard/segments/*/segment.json"])
def test_a_damaged_kept_shard_is_refused_naming_the_folder(tmp_path: Path,
                                                           damaged: str) -> None:
    docs = Documents(ids=("a", "b", "c"), vectors=np.eye(3, 8, dtype=np.float32))
    options = QdrantOptions(path=str(tmp_path))
    INDEX_KINDS.build(options, docs, where="candidates.q.index").close()
    (folder,) = tmp_path.glob("evalq-*")
    files = list(folder.glob(damaged))
    assert files
    for file in files:
        file.write_text("{")
    with pytest.raises(InputError) as caught:
        INDEX_KINDS.build(options, docs, where="candidates.q.index")
    assert caught.value.field == "candidates.q.index.path"
    assert str(folder) in caught.value.message and caught.value.fix
    assert f"delete {folder}" in caught.value.fix
