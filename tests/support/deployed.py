"""What the tests of document vectors borrowed from a deployment's database share
(tests/retrieve/test_vdb_sources.py: a pgvector table and a Qdrant shard;
tests/retrieve/test_vdb_qdrant_documents.py: a collection on a Qdrant server): the pydocs
slice they read, its corpus ids, random rows, the plan of a candidate whose documents
come from a source, and today's reference vectors of the slice's corpus."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from evalq.data.manifest import load_dataset
from evalq.engines.inprocess import InProcessEncoder
from evalq.recipe.plan import plan_file
from support import recipes

QUERIES, DOCS = 10, 30


def random_rows(n: int, width: int = 384, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, width)).astype(np.float32)


def dataset() -> Any:
    return load_dataset(recipes.PYDOCS, max_queries=QUERIES, max_docs=DOCS)


def corpus_ids() -> list[str]:
    return list(dataset().corpus.ids)


def plan_documents(tmp_path: Path, documents: dict[str, Any]) -> Any:
    """The plan of a recipe whose candidate ``deployed`` reads its documents from
    ``documents`` (a ``documents:`` value)."""
    data = recipes.recipe("sides", cache=tmp_path / "cache", output=tmp_path / "out",
                          queries=QUERIES, docs=DOCS,
                          candidates=[{"name": "deployed", "documents": documents}])
    return plan_file(recipes.write(tmp_path / "sides.yaml", data))


def reference_documents(tmp_path: Path) -> tuple[dict[str, Any], Any, np.ndarray]:
    """A recipe's data over the slice (no candidates, no parity), the slice, and the
    reference engine's vectors of its corpus: the index a deployment would hold."""
    data = recipes.recipe("keep", cache=tmp_path / "cache", output=tmp_path / "out",
                          queries=QUERIES, docs=DOCS, parity={"enabled": False})
    plan = plan_file(recipes.write(tmp_path / "settings.yaml", data))
    ds = dataset()
    encoder = InProcessEncoder(plan.reference.model_folder(),
                               settings=plan.reference.encoding_settings())
    try:
        docs = encoder.embed(ds.corpus.texts_for_encoding(" "))
    finally:
        encoder.close()
    return data, ds, docs
