"""The options of ``kind: pgvector``, by pgvector's own names: the table's vector type
and distance operator, the index (HNSW, IVFFlat or none) and its build options, and the
search-time settings one index serves a sweep of.

Apart from :mod:`evalq.retrieve.pgvector_kind` (the table, the index and the search) so
that the plan reads and refuses a variant's options without the database code, as
:mod:`evalq.retrieve.qdrant_options` does for Qdrant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field, model_validator

from evalq.core.options import StrictOptions, at_most
from evalq.retrieve import pg_server
from evalq.retrieve.kinds import KindOptions, SweepOptions

PG_EF_SEARCH = 40  # pgvector's default hnsw.ef_search
PG_MAX_PROBES = 32768  # pgvector's range of ivfflat.probes (past it the SET failed, late)
# bit re-rank depth: 10**12 planned and re-ranked the whole table by the float vectors
Rerank = Annotated[int, Field(ge=1), at_most(
    100_000, "rerank", "the Hamming stage's candidates re-ranked by the float vectors",
    "a few times the depth (10x is usual), or vector_type: vector for float search")]


class PgvectorSearch(StrictOptions):
    """Search-time settings (``SET hnsw.ef_search``, ``SET ivfflat.probes``) and the
    re-rank depth of ``vector_type: bit``; one index serves a sweep of them."""

    ef_search: int | None = Field(default=None, ge=1, le=1000)
    probes: int | None = Field(default=None, ge=1, le=PG_MAX_PROBES)
    rerank: Rerank | None = None
    iterative_scan: Literal["off", "strict_order", "relaxed_order"] | None = None


class PgvectorSweep(SweepOptions):
    """``sweep:`` of a pgvector index: ``ef_search`` (HNSW) or ``probes`` (IVFFlat), SET
    per search on the one table and index."""

    TARGETS: ClassVar[dict[str, tuple[str, ...]]] = {
        "ef_search": ("ef_search",), "probes": ("probes",)}
    BUILD_TIME: ClassVar[tuple[str, ...]] = ("index", "m", "ef_construction", "lists",
                                             "vector_type", "operator")

    ef_search: list[int] | None = None
    probes: list[int] | None = None


class PgvectorOptions(KindOptions):
    """``index: {kind: pgvector, ...}``: pgvector's index and vector type, by its names.

    ``dsn`` points at a team's own PostgreSQL with pgvector; without it an embedded
    server starts in ``data_dir``, by default a folder under the recipe's ``cache_dir``
    (a temporary one with ``--no-cache``), whose tables the next run reuses. ``index``:
    ``hnsw`` (``m``, ``ef_construction``; searched with ``ef_search``), ``ivfflat``
    (``lists``; searched with ``probes``) or ``none`` (exact, a Seq Scan).
    ``vector_type``: ``vector`` (float32), ``halfvec`` (float16) or ``bit``
    (``binary_quantize``, Hamming distance; ``rerank`` re-ranks that many candidates
    by ``operator`` on the float vectors).
    ``operator``: ``<#>`` inner product (what exact search uses), ``<=>`` cosine,
    ``<->`` L2. ``iterative_scan`` (pgvector 0.8: ``strict_order`` / ``relaxed_order``)
    lets an index scan go on past ``ef_search`` / ``probes`` rows.
    """

    kind: Literal["pgvector"] = "pgvector"
    dsn: str | None = Field(default=None, min_length=1)
    data_dir: str | None = Field(default=None, min_length=1)
    allow_root: bool = False
    index: Literal["hnsw", "ivfflat", "none"] = "hnsw"
    m: int | None = Field(default=None, ge=2, le=100)
    ef_construction: int | None = Field(default=None, ge=4, le=1000)
    lists: int | None = Field(default=None, ge=1, le=32768)
    ef_search: int | None = Field(default=None, ge=1, le=1000)
    probes: int | None = Field(default=None, ge=1, le=PG_MAX_PROBES)
    vector_type: Literal["vector", "halfvec", "bit"] = "vector"
    operator: Literal["<#>", "<=>", "<->"] = "<#>"
    rerank: Rerank | None = None
    iterative_scan: Literal["off", "strict_order", "relaxed_order"] | None = None
    enable_seqscan: bool = False
    sweep: PgvectorSweep | None = None

    @model_validator(mode="after")
    def _options_of_the_index(self) -> PgvectorOptions:
        hnsw = {"m": self.m, "ef_construction": self.ef_construction,
                "ef_search": self.ef_search}
        ivf = {"lists": self.lists, "probes": self.probes}
        for index, names in (("hnsw", hnsw), ("ivfflat", ivf)):
            wrong = [n for n, v in names.items() if v is not None and self.index != index]
            if wrong:
                raise ValueError(f"{', '.join(wrong)} apply to index: {index}, not "
                                 f"index: {self.index}")
        if self.rerank is not None and self.vector_type != "bit":
            raise ValueError("rerank applies to vector_type: bit (a float re-rank of the "
                             "Hamming candidates)")
        if self.iterative_scan is not None and self.index == "none":
            raise ValueError("iterative_scan applies to an index (hnsw, ivfflat)")
        ef = self.ef_search or PG_EF_SEARCH
        if self.rerank is not None and self.index == "hnsw" and self.rerank > ef \
                and self.iterative_scan in (None, "off"):
            raise ValueError(f"rerank {self.rerank} exceeds ef_search {ef}: an HNSW scan "
                             "returns at most ef_search rows, so the re-rank would see only "
                             f"{ef}; set ef_search >= rerank, or iterative_scan")
        if self.m is not None and self.ef_construction is not None \
                and self.ef_construction < 2 * self.m:
            raise ValueError("pgvector needs ef_construction >= 2 * m")
        if self.dsn is not None and self.data_dir is not None:
            raise ValueError("dsn (your database) and data_dir (the embedded server's "
                             "folder) exclude each other")
        if self.data_dir is not None and Path(self.data_dir).expanduser().is_file():
            raise ValueError(f"data_dir {self.data_dir} is a file; fix: name a folder (it "
                             "is made if missing), or leave data_dir out")
        return self

    def record(self) -> dict[str, Any]:
        out = self.model_dump(exclude={"kind", "dsn", "sweep"})
        out["dsn"] = None if self.dsn is None else pg_server.remote(self.dsn).label
        return out

    def with_home(self, cache_dir: Path) -> PgvectorOptions:
        """The embedded server's data folder under the cache (``vdb/<server>``, named by
        the PostgreSQL build, since a data folder opens only with the major version
        that made it), unless the index names its own ``data_dir`` or a ``dsn``."""
        if self.dsn is not None or self.data_dir is not None:
            return self
        home = cache_dir / "vdb" / pg_server.server_build()
        return self.model_copy(update={"data_dir": str(home)})

    def search_options(self) -> PgvectorSearch:
        return PgvectorSearch(ef_search=self.ef_search, probes=self.probes,
                              rerank=self.rerank, iterative_scan=self.iterative_scan)
