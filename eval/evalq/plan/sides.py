"""Where a variant's two sides come from: "can I keep my index?" (issue 31).

A candidate normally encodes its documents and its queries itself. Re-embedding a corpus
is the expensive, risky part of a change, so a deployment often keeps the document
vectors it has and changes only the query side (or the reverse). A variant says so with
``documents:`` / ``queries:``:

- ``reference`` or the name of a variant listed earlier: that variant's vectors, as its
  engine produced them (before its own ``vectors:`` truncation or quantization; this
  variant's ``vectors:`` applies to both sides). The side is not encoded again, not even
  from the cache, and a variant that borrows both sides builds no engine at all.
- ``{path: vectors.npy, ids: ids.txt}``: vectors the user already has on disk (``.npy``
  with a text file of ids, one a line, or ``.parquet`` with an id and a vector column),
  for either side. Rows are picked by the dataset's corpus (or query) ids, so
  ``max_docs`` / ``max_queries`` slices work; with several datasets, ``datasets:
  {<name>: {path, ids}}``. Before the run trusts the file, a seeded sample of its rows is
  compared with the reference engine's vectors of the same texts (``probe``: cosine and
  norm within a stated tolerance).
- ``{pgvector: {dsn, table, id_column, vector_column}}``, ``{qdrant: {path,
  collection, id_payload}}`` (a shard on disk) or ``{qdrant: {url, collection,
  api_key_env, id_payload}}`` (a Qdrant server) (documents only): the vectors a
  deployment's database already holds, read by corpus id and checked like a file
  (width, ids, coverage, probe).
  Queries are not kept in an index, so ``queries:`` takes no database source.

These are declarations only; the plan checks them (``evalq.recipe.plan_sides``) and the
run reuses the vectors (``evalq.execute.borrowed``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import Field, model_validator

from evalq.core.options import StrictOptions
from evalq.core.redact import without_password
from evalq.retrieve.qdrant_options import check_server

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
    seed: int = Field(default=0, ge=0)  # numpy's generators refuse a negative seed


class PgvectorVectors(StrictOptions):
    """Document vectors in a pgvector table a deployment already serves: ``dsn`` (its
    connection string), ``table`` (``name`` or ``schema.name``), the column of document
    ids (read as text) and the ``vector`` / ``halfvec`` column."""

    dsn: str = Field(min_length=1)
    table: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_$]*(\.[A-Za-z_][A-Za-z0-9_$]*)?$")
    id_column: str = Field(default="id", min_length=1)
    vector_column: str = Field(default="embedding", min_length=1)


class QdrantVectors(StrictOptions):
    """Document vectors in Qdrant: a shard on disk (``path``, Qdrant's engine
    in-process; ``collection``: its folder under ``path`` when it is one of several) or a
    collection on a team's Qdrant server (``url``, through qdrant-client; ``collection``
    names it, ``api_key_env`` the environment variable holding its API key). ``path``
    and ``url`` exclude each other. ``id_payload``: the payload key holding the document
    id (null: the point id is the document id)."""

    path: str | None = Field(default=None, min_length=1)
    url: str | None = Field(default=None, min_length=1)
    # a folder name under path (or a server's collection), never a way out of it
    # (`../..` opened, and wrote into, a folder the recipe did not name)
    collection: str | None = Field(default=None,
                                   pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}$")
    api_key_env: str | None = Field(default=None, min_length=1)
    id_payload: str | None = "id"

    @model_validator(mode="after")
    def _shard_or_server(self) -> QdrantVectors:
        if self.url is not None and self.path is not None:
            raise ValueError("url (a Qdrant server) and path (a shard on disk) exclude "
                             "each other; fix: keep one")
        if self.url is None:
            if self.path is None:
                raise ValueError("give path (a Qdrant shard on disk) or url (a Qdrant "
                                 "server, with collection)")
            if self.api_key_env is not None:
                raise ValueError("api_key_env applies to a Qdrant server (url:); fix: set "
                                 "url, or leave api_key_env out")
            return self
        check_server(self.url, self.api_key_env)
        if self.collection is None:
            raise ValueError("a Qdrant server holds many collections; fix: name the one "
                             "with the corpus's vectors (collection: ...)")
        return self

    def label(self) -> str:
        """The source in words (a password in the url masked)."""
        if self.url is not None:
            return (f"Qdrant collection {self.collection} at "
                    f"{without_password(self.url)}")
        assert self.path is not None
        return "Qdrant shard " + self.path + (f"/{self.collection}"
                                              if self.collection else "")


class VectorSource(StrictOptions):
    """Where stored vectors are read from: ``.npy`` (float, 2-D) with ``ids`` (a text
    file, one id a line, row order), ``.parquet`` with ``id_column`` and ``vector_column``,
    a ``pgvector`` table or a ``qdrant`` shard. The fields of one dataset's source and of
    the recipe's single-dataset form alike."""

    path: str | None = None
    ids: str | None = None
    id_column: str = "id"
    vector_column: str = "vector"
    pgvector: PgvectorVectors | None = None
    qdrant: QdrantVectors | None = None


class VectorFile(VectorSource):
    """One dataset's stored vectors (exactly one of ``path``, ``pgvector``, ``qdrant``)."""

    @model_validator(mode="after")
    def _one_source(self) -> VectorFile:
        if sum(x is not None for x in (self.path, self.pgvector, self.qdrant)) != 1:
            raise ValueError("give exactly one of path (a vector file), pgvector: {dsn, "
                             "table, ...} or qdrant: {path or url, collection, ...}")
        return self

    def label(self) -> str:
        """The source in words, for the plan, the record and errors (no password)."""
        if self.pgvector is not None:
            return (f"pgvector table {self.pgvector.table} at "
                    f"{without_password(self.pgvector.dsn)}")
        if self.qdrant is not None:
            return self.qdrant.label()
        return f"file {self.path}"


class StoredVectors(VectorSource):
    """``documents: {path, ids}``, ``{pgvector: {dsn, table}}`` or ``{qdrant: {path or url}}``
    for a recipe with one dataset, or ``documents: {datasets: {<dataset>: {...}}}``;
    ``probe`` for any."""

    datasets: dict[str, VectorFile] | None = None
    probe: ProbeOptions = ProbeOptions()

    @model_validator(mode="after")
    def _one_form(self) -> StoredVectors:
        if sum(x is not None for x in (self.path, self.pgvector, self.qdrant,
                                       self.datasets)) != 1:
            raise ValueError("give the vectors as {path: ..., ids: ...}, {pgvector: {dsn, "
                             "table}} or {qdrant: {path or url, collection}} (one dataset), or "
                             "{datasets: {<dataset>: {path: ..., ids: ...}}}: exactly one")
        return self

    def file_for(self, dataset: str) -> VectorFile | None:
        """The source of ``dataset``; the single one when no mapping is given."""
        if self.datasets is not None:
            return self.datasets.get(dataset)
        return VectorFile(**{name: getattr(self, name) for name in VectorSource.model_fields})


Side = str | StoredVectors | None


@dataclass(frozen=True)
class SidePlan:
    """A variant's two sides, resolved by the plan: the variant each borrowed side comes
    from (its name, ``reference`` resolved), or the vector file; None where the variant
    encodes the side itself."""

    documents: str | None = None
    queries: str | None = None
    documents_file: StoredVectors | None = None
    queries_file: StoredVectors | None = None

    @property
    def encodes_documents(self) -> bool:
        return self.documents is None and self.documents_file is None

    @property
    def encodes_queries(self) -> bool:
        return self.queries is None and self.queries_file is None

    @property
    def reads_files(self) -> bool:
        """Whether a side comes from stored vectors (which the reference's probe checks)."""
        return self.documents_file is not None or self.queries_file is not None

    def stored(self, side: str) -> StoredVectors | None:
        """The stored vectors ``side`` ("documents" / "queries") is read from, if any."""
        return self.documents_file if side == "documents" else self.queries_file

    @property
    def builds_engine(self) -> bool:
        """A variant that borrows both sides has nothing to encode: no engine is built."""
        return self.encodes_documents or self.encodes_queries

    @property
    def borrows(self) -> bool:
        return not (self.encodes_documents and self.encodes_queries)

    def source(self, side: str) -> str | None:
        """Where ``side`` ("documents" / "queries") comes from, in words; None: encoded."""
        stored = self.stored(side)
        if stored is not None:
            if stored.datasets is None:
                single = stored.file_for("")
                assert single is not None
                return single.label()
            return ", ".join(f"{k}: {v.label()}" for k, v in stored.datasets.items())
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
