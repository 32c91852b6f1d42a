"""Where a variant's two sides come from: "can I keep my index?" (issue 31).

A candidate normally encodes its documents and its queries itself. Re-embedding a corpus
is the expensive, risky part of a change, so a deployment often keeps the document
vectors it has and changes only the query side (or the reverse). A variant says so with
``documents:`` / ``queries:``:

- ``reference`` or the name of a variant listed earlier: that variant's vectors, as its
  engine produced them (before its own ``vectors:`` truncation or quantization; this
  variant's ``vectors:`` applies to both sides). The side is not encoded again, not even
  from the cache, and a variant that borrows both sides builds no engine at all.
- ``{path: vectors.npy, ids: ids.txt}`` (documents only): vectors the user already has
  on disk (``.npy`` with a text file of ids, one a line, or ``.parquet`` with an id and a
  vector column). Rows are picked by the dataset's corpus ids, so ``max_docs`` slices
  work; with several datasets, ``datasets: {<name>: {path, ids}}``. Before the run trusts
  the file, a seeded sample of its rows is compared with the reference engine's vectors
  of the same documents (``probe``: cosine and norm within a stated tolerance).

These are declarations only; the plan checks them (``evalq.recipe.plan_sides``) and the
run reuses the vectors (``evalq.execute.borrowed``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field, model_validator

from evalq.core.options import StrictOptions

REFERENCE = "reference"  # ``documents: reference``: the recipe's reference variant


class ProbeOptions(StrictOptions):
    """How a vector file is checked against today's stack before the run uses it: a
    seeded sample of ``texts`` documents, each of whose stored vectors must reach
    ``min_cosine`` with the reference engine's vector of the same text and keep its
    norm within ``norm_tolerance`` (relative), since an inner-product search sees
    norms that a cosine ignores."""

    texts: int = Field(default=16, ge=1)
    min_cosine: float = Field(default=0.999, ge=-1, le=1, allow_inf_nan=False)
    norm_tolerance: float = Field(default=0.01, ge=0, allow_inf_nan=False)
    seed: int = 0


class VectorFile(StrictOptions):
    """One dataset's vectors on disk: ``.npy`` (float, 2-D) with ``ids`` (a text file,
    one id a line, row order), or ``.parquet`` with ``id_column`` and ``vector_column``."""

    path: str
    ids: str | None = None
    id_column: str = "id"
    vector_column: str = "vector"


class StoredVectors(StrictOptions):
    """``documents: {path, ids}`` for a recipe with one dataset, or ``documents:
    {datasets: {<dataset>: {path, ids}}}``; ``probe`` for either."""

    path: str | None = None
    ids: str | None = None
    id_column: str = "id"
    vector_column: str = "vector"
    datasets: dict[str, VectorFile] | None = None
    probe: ProbeOptions = ProbeOptions()

    @model_validator(mode="after")
    def _one_form(self) -> StoredVectors:
        if (self.path is None) == (self.datasets is None):
            raise ValueError("give the vector file as {path: ..., ids: ...} (one dataset) "
                             "or {datasets: {<dataset>: {path: ..., ids: ...}}}, not both "
                             "or neither")
        return self

    def file_for(self, dataset: str) -> VectorFile | None:
        """The file of ``dataset``; the single file when no mapping is given."""
        if self.datasets is not None:
            return self.datasets.get(dataset)
        assert self.path is not None
        return VectorFile(path=self.path, ids=self.ids, id_column=self.id_column,
                          vector_column=self.vector_column)


Side = str | StoredVectors | None


@dataclass(frozen=True)
class SidePlan:
    """A variant's two sides, resolved by the plan: the variant each borrowed side comes
    from (its name, ``reference`` resolved), or the vector file; None where the variant
    encodes the side itself."""

    documents: str | None = None
    queries: str | None = None
    documents_file: StoredVectors | None = None

    @property
    def encodes_documents(self) -> bool:
        return self.documents is None and self.documents_file is None

    @property
    def encodes_queries(self) -> bool:
        return self.queries is None

    @property
    def builds_engine(self) -> bool:
        """A variant that borrows both sides has nothing to encode: no engine is built."""
        return self.encodes_documents or self.encodes_queries

    @property
    def borrows(self) -> bool:
        return not (self.encodes_documents and self.encodes_queries)

    def source(self, side: str) -> str | None:
        """Where ``side`` ("documents" / "queries") comes from, in words; None: encoded."""
        if side == "documents" and self.documents_file is not None:
            files = ([self.documents_file.path] if self.documents_file.path else
                     [f"{k}: {v.path}" for k, v in (self.documents_file.datasets or {}).items()])
            return "file " + ", ".join(str(f) for f in files)
        name = self.documents if side == "documents" else self.queries
        return None if name is None else f"variant {name}"

    def describe(self) -> str:
        """One line for the plan: what is encoded and what is reused, from where."""
        encoded = [s for s in ("documents", "queries") if self.source(s) is None]
        reused = [f"{s} reused from {self.source(s)} (not encoded)"
                  for s in ("documents", "queries") if self.source(s) is not None]
        head = ("encodes " + " and ".join(encoded) if encoded
                else "encodes nothing (no engine is built)")
        return "; ".join([head, *reused])
