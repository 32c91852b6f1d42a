"""The ``exact`` retrieval kind: exhaustive FAISS search (:func:`evalq.retrieve.search.search`)
over float vectors, or over the variant's int8 / binary codes with optional rescoring.

It is what every variant is searched with first: a variant without ``index:`` is judged
on it, and a variant with another kind has its loss split against it. Its ranking keeps
trec_eval's tie order at the depth boundary (see :mod:`evalq.retrieve.search`).
"""

from __future__ import annotations

import time
from typing import Any, Literal

import numpy as np

from evalq.core.ranking import Ranking
from evalq.retrieve.kinds import Documents, IndexProof, IndexStats, KindOptions, KindSpec, Queries
from evalq.retrieve.search import search
from evalq.retrieve.vectorquant import QuantizedDocuments, quantize_documents


class ExactOptions(KindOptions):
    """``index: {kind: exact}``: the same as no ``index:`` (exhaustive search, over the
    stored form that ``vectors:`` sets)."""

    kind: Literal["exact"] = "exact"


class ExactIndex:
    """Exhaustive inner-product search over what the variant stores."""

    def __init__(self, docs: Documents) -> None:
        self._ids: tuple[str, ...] = ()
        self._vectors = np.zeros((0, 0), dtype=np.float32)
        self._stored: QuantizedDocuments | None = None
        self._build_s = 0.0
        self.add(docs)

    def add(self, docs: Documents) -> None:
        if docs.vectors is None:
            raise ValueError("the exact index searches vectors; these documents have none")
        began = time.perf_counter()
        vectors = np.asarray(docs.vectors, dtype=np.float32)
        if not self._ids:
            self._vectors, self._stored = vectors, docs.stored
        else:
            self._vectors = np.concatenate([self._vectors, vectors])
            if self._stored is not None:  # int8 calibrates on the whole collection
                self._stored = quantize_documents(self._vectors, self._stored.spec)
        self._ids = (*self._ids, *docs.ids)
        self._build_s += time.perf_counter() - began

    def search(self, queries: Queries, depth: int, params: Any = None) -> Ranking:
        if queries.vectors is None:
            raise ValueError("the exact index searches with query vectors; these have none")
        return search(queries.vectors, self._vectors, doc_ids=list(self._ids),
                      query_ids=list(queries.ids), depth=depth,
                      vectors=self._stored.spec if self._stored else None,
                      quantized=self._stored)

    def stats(self) -> IndexStats:
        size = self._stored.nbytes if self._stored else int(self._vectors.nbytes)
        return IndexStats(bytes=int(size), build_s=self._build_s, documents=len(self._ids))

    def proof(self) -> IndexProof:
        spec = self._stored.spec if self._stored else None
        quantize = spec.quantize if spec else "none"
        method = {"none": "IndexFlatIP", "int8": "IndexFlatIP over int8 codes",
                  "binary": "IndexBinaryFlat"}[quantize]
        params: dict[str, Any] = {"quantize": quantize,
                                  "rescore": spec.rescore if spec else None}
        if spec is not None and spec.queries == "float":
            method = "IndexFlatIP over the stored documents, float queries"
            params["queries"] = "float"
        return IndexProof(kind="exact", exact=True, method=method, params=params)

    def close(self) -> None:
        self._vectors = np.zeros((0, 0), dtype=np.float32)
        self._stored = None


def _build(options: ExactOptions, docs: Documents, where: str) -> ExactIndex:
    return ExactIndex(docs)


KIND = KindSpec(name="exact", summary="exhaustive FAISS search (IndexFlatIP, or the int8 / "
                "binary codes `vectors:` sets), trec_eval's tie order",
                inputs="vectors", options=ExactOptions, build=_build, exhaustive=True)
