"""The index protocol: what every retrieval kind provides, and the registry of kinds.

A retrieval kind is how a deployment finds documents for a query: exact FAISS search,
a FAISS ANN index, BM25 over texts, and (later) a vector database. Each kind is one
module that declares its options model (a :class:`KindOptions` with its own ``kind:``
literal) and a :class:`KindSpec`, and one line in :mod:`evalq.retrieve.registry` adds it
to :data:`~evalq.retrieve.registry.INDEX_KINDS`. The recipe's ``index:`` section, the
plan's checks, the run and the docs' generated page all read that registry, so a new kind
touches nothing else (docs/development/architecture.md, "Adding an index kind").

Why a protocol: the run judges a variant on whatever index serves it, and the loss that
index adds is measured against exact search of the same vectors. The run therefore needs
the same five things of every kind: build it (or attach to one that exists), add to it,
search it with the kind's own typed search options, say what it cost, and prove which
index answered (an "ANN" run that silently searched exhaustively measures nothing), then
close it (a database client holds a connection or a server).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, ClassVar, Literal, Protocol, TypeVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from evalq.core.options import StrictOptions
from evalq.core.ranking import Ranking

Inputs = Literal["vectors", "texts"]


@dataclass(frozen=True)
class Documents:
    """What an index is built from: ids with their vectors (vector kinds) or texts (text
    kinds). ``stored`` is the quantized form of ``vectors`` when the variant quantizes its
    vectors (``vectors.quantize``); only the exact kind searches it (the recipe refuses an
    index kind together with vector quantization)."""

    ids: tuple[str, ...]
    vectors: np.ndarray | None = None
    texts: Sequence[str] | None = None
    stored: Any = None  # evalq.retrieve.vectorquant.QuantizedDocuments


@dataclass(frozen=True)
class Queries:
    ids: tuple[str, ...]
    vectors: np.ndarray | None = None
    texts: Sequence[str] | None = None


@dataclass(frozen=True)
class IndexStats:
    """What the index costs: its size, how long it took to build, and the kind's own
    figures (``detail``: FAISS's train/add split, queries/s ...), which the manifest's
    ``index`` entry records as they are."""

    bytes: int
    build_s: float
    documents: int
    detail: Mapping[str, Any] = field(default_factory=dict)


class IndexProof(BaseModel):
    """Which index answered, read back from the index rather than from the recipe: the
    kind, whether every search was exhaustive, the structure searched (``IndexFlatIP``,
    ``IndexHNSWFlat``, ``bm25s``) and the parameters in effect at search time. Stored in
    the manifest beside the index's costs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    exact: bool
    method: str
    params: dict[str, Any] = Field(default_factory=dict)


class SweepOptions(StrictOptions):
    """The ``sweep:`` of an index: ONE search-time parameter and the values it is searched
    at, strictly increasing (``sweep: {ef_search: [10, 20, 40, 80]}``). Each kind that can
    be swept subclasses it with one ``list`` field per search-time parameter, and says in
    ``TARGETS`` where each one sits in its options (``("search_params", "hnsw_ef")``) and
    in ``BUILD_TIME`` which of its options shape the built index: those cannot be swept,
    because the sweep's point is one build searched at several settings.

    Why increasing: every one of these parameters buys accuracy with time as it grows, so
    the list is the order in which the sweep's gates are tested (most accurate first,
    :mod:`evalq.execute.sweep`); a list out of order is a slip, not a second order."""

    TARGETS: ClassVar[dict[str, tuple[str, ...]]] = {}
    BUILD_TIME: ClassVar[tuple[str, ...]] = ()

    @model_validator(mode="before")
    @classmethod
    def _search_time_only(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        searched = ", ".join(cls.TARGETS)
        for name in data:
            if name in cls.BUILD_TIME:
                raise ValueError(
                    f"sweep.{name}: {name} is a build-time parameter (the index is built "
                    f"with it, and a sweep searches one built index); fix: sweep one of "
                    f"the search-time parameters {searched}, or write one variant per {name}")
        for name, values in data.items():
            if isinstance(values, list) and any(isinstance(v, bool) for v in values):
                raise ValueError(f"sweep.{name}: values must be numbers, not true / false")
        return data

    @model_validator(mode="after")
    def _one_increasing_list(self) -> SweepOptions:
        given = {n: v for n, v in self.model_dump().items() if v is not None}
        searched = ", ".join(self.TARGETS)
        if len(given) != 1:
            raise ValueError(f"sweep: give exactly one search-time parameter (one of "
                             f"{searched}), not {len(given) or 'none'}; fix: one curve per "
                             "variant, a second parameter in a second variant")
        (name, values), = given.items()
        if not values:
            raise ValueError(f"sweep.{name}: the list is empty; fix: give the values to "
                             "search at, e.g. [10, 20, 40, 80]")
        if any(b <= a for a, b in pairwise(values)):
            raise ValueError(f"sweep.{name}: {values} is not strictly increasing; fix: "
                             "list each value once, smallest (fastest) first")
        return self

    def parameter(self) -> tuple[str, tuple[float, ...]]:
        """The swept parameter's name and its values."""
        (name, values), = ((n, v) for n, v in self.model_dump().items() if v is not None)
        return name, tuple(values)


class KindOptions(StrictOptions):
    """The base of each kind's options model; a kind narrows ``kind`` to its own literal
    name, which is what the recipe's ``index: {kind: ...}`` selects. A kind whose index
    can be searched at several settings declares ``sweep: <its SweepOptions> | None``."""

    kind: str

    def record(self) -> dict[str, Any]:
        """The options as the manifest records them (without ``kind``; ``sweep`` is
        recorded with its measured points, :func:`evalq.retrieve.sweep.sweep_index`)."""
        return self.model_dump(exclude={"kind", "sweep"})

    def search_options(self) -> BaseModel | None:
        """The kind's typed search options as the recipe set them (None: it has none)."""
        return None

    def with_home(self, cache_dir: Path) -> KindOptions:
        """These options with the kind's default data folder under the recipe's
        ``cache_dir``, for a kind that keeps its index on disk and was given no folder
        of its own (a database's tables, a shard): so the next run of the same recipe
        finds them complete and reuses them instead of loading and building again. A
        kind that keeps nothing between runs returns itself."""
        return self

    def check_width(self, dim: int, where: str) -> None:
        """Refuse, at plan time, options this kind cannot build over ``dim``-wide vectors
        (an :class:`~evalq.core.errors.InputError` naming ``where``'s field), so a bad
        index stops the plan, not the run after every variant has encoded. Most kinds
        take any width."""
        return None

    def sweep_options(self) -> SweepOptions | None:
        """The ``sweep:`` the recipe set (None: the kind has none, or it was not set)."""
        found = getattr(self, "sweep", None)
        return found if isinstance(found, SweepOptions) else None

    def configured(self) -> float | None:
        """The swept parameter's value as the options set it outside the sweep (what the
        variant's own run searched with; None: the kind's default)."""
        sweep = self.sweep_options()
        if sweep is None:
            return None
        found: Any = self.model_dump()
        for key in type(sweep).TARGETS[sweep.parameter()[0]]:
            found = found.get(key) if isinstance(found, dict) else None
        return found if isinstance(found, int | float) else None

    def at(self, value: float) -> KindOptions:
        """These options with the swept parameter set to ``value`` and no sweep, validated
        again as a whole, so every check the kind makes of its options (a range, a
        parameter of another index type, pgvector's re-rank within ef_search) holds at
        every swept value, and the kind's search options are read from the result."""
        sweep = self.sweep_options()
        if sweep is None:
            raise ValueError(f"index kind '{self.kind}' sets no sweep")
        name, _ = sweep.parameter()
        data = self.model_dump(exclude={"sweep"}, exclude_none=True)
        node = data
        *parents, leaf = type(sweep).TARGETS[name]
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value
        return type(self).model_validate(data)

    @model_validator(mode="after")
    def _every_swept_value_valid(self) -> KindOptions:
        sweep = self.sweep_options()
        if sweep is not None:
            name, values = sweep.parameter()
            for value in values:
                try:
                    self.at(value)
                except ValidationError as exc:
                    why = "; ".join(e["msg"].removeprefix("Value error, ")
                                    for e in exc.errors())
                    raise ValueError(f"sweep.{name}: at {value} the options are refused "
                                     f"({why}); fix: sweep only values this index takes"
                                     ) from None
        return self


class Index(Protocol):
    """One built (or attached) index of one kind."""

    def add(self, docs: Documents) -> None:
        """Add documents (ids not yet in the index)."""

    def search(self, queries: Queries, depth: int, params: Any = None) -> Ranking:
        """The top ``depth`` documents per query, in trec_eval's order. ``params`` is the
        kind's typed search options; None uses the ones its options set."""

    def stats(self) -> IndexStats: ...

    def proof(self) -> IndexProof: ...

    def close(self) -> None: ...


class SweptIndex(Index, Protocol):
    """An index one build of which is searched at several search-time settings (a kind
    whose options declare ``sweep:``): each query is searched and timed alone, so the
    sweep's latencies are per query (p50 / p99), as one user's request sees them."""

    def search_timed(self, queries: Queries, depth: int, params: Any
                     ) -> tuple[Ranking, np.ndarray]:
        """:meth:`search` with ``params``, and each query's seconds."""


IndexT = TypeVar("IndexT", bound=Index)


def filled(index: IndexT, docs: Documents) -> IndexT:
    """``index`` with ``docs`` added, or closed and the error raised: a database kind that
    fails while loading (a dead server, a full disk) must not leave its connection, table
    or shard open behind the error."""
    try:
        index.add(docs)
    except BaseException:
        index.close()
        raise
    return index


@dataclass(frozen=True)
class KindSpec:
    """A retrieval kind's declaration: its name, what it indexes, its options model and
    how to build one. ``attach`` opens an index that outlives the run (a database
    collection); kinds that keep nothing between runs leave it None."""

    name: str
    summary: str
    inputs: Inputs
    options: type[KindOptions]
    build: Callable[[Any, Documents, str], Index]
    search_options: type[BaseModel] | None = None
    exhaustive: bool = False  # every search scores every document (no approximation)
    attach: Callable[[Any, str], Index] | None = None
    # a database: its index answers concurrent searches through ``worker(timeout_s)``
    # (:mod:`evalq.retrieve.workers`), which ``evalq load``'s database stage drives
    database: bool = False


class KindRegistry:
    """Retrieval kinds by name; a second registration of a name is refused, so two
    modules cannot silently claim the same ``kind:``."""

    def __init__(self) -> None:
        self._specs: dict[str, KindSpec] = {}

    def register(self, spec: KindSpec) -> KindSpec:
        if spec.name in self._specs:
            raise ValueError(f"index kind '{spec.name}' is already registered")
        literal = spec.options.model_fields["kind"]
        if literal.default != spec.name:
            raise ValueError(f"index kind '{spec.name}': its options model "
                             f"{spec.options.__name__} must default 'kind' to '{spec.name}'")
        self._specs[spec.name] = spec
        return spec

    def unregister(self, name: str) -> None:
        del self._specs[name]

    @contextmanager
    def added(self, spec: KindSpec) -> Iterator[KindSpec]:
        """Register ``spec`` for the duration of a ``with`` block (tests, plug-ins)."""
        self.register(spec)
        try:
            yield spec
        finally:
            self.unregister(spec.name)

    def get(self, name: str) -> KindSpec:
        """The kind a parsed recipe names (the recipe allows registered names only, so a
        miss is evalq's bug)."""
        if name not in self._specs:
            raise KeyError(f"no index kind '{name}' is registered")
        return self._specs[name]

    def specs(self, inputs: Inputs | None = None) -> tuple[KindSpec, ...]:
        return tuple(s for s in self._specs.values() if inputs is None or s.inputs == inputs)

    def names(self, inputs: Inputs | None = None) -> tuple[str, ...]:
        return tuple(s.name for s in self.specs(inputs))

    def parse(self, value: Any, inputs: Inputs, default: str) -> KindOptions:
        """A recipe's ``index:`` mapping as its kind's options model, chosen by ``kind:``
        (``default`` when the mapping has none). An unknown kind, or one that indexes
        other inputs, is a ValueError naming the registered ones; the kind's own model
        reports its fields' errors at their paths."""
        if isinstance(value, KindOptions):
            return value
        if not isinstance(value, Mapping):
            raise ValueError("must be a mapping with 'kind' (one of "
                             f"{', '.join(self.names(inputs))})")
        kind = value.get("kind", default)
        spec = self._specs.get(kind) if isinstance(kind, str) else None
        if spec is None or spec.inputs != inputs:
            why = ("indexes texts" if spec is not None and spec.inputs != inputs
                   else "is not a registered index kind")
            raise ValueError(f"kind {kind!r} {why}; use one of: {', '.join(self.names(inputs))}")
        return spec.options.model_validate(dict(value))

    def build(self, options: KindOptions, docs: Documents, *, where: str) -> Index:
        """Build the index ``options`` describe over ``docs``; ``where`` names the recipe
        field in its errors (exit 2)."""
        return self.get(options.kind).build(options, docs, where)


def recall_at(ann: Ranking, exact: Ranking, k: int) -> np.ndarray:
    """Per query: share of the exact top-``k`` that the index's top-``k`` also returns."""
    if ann.query_ids != exact.query_ids:
        raise ValueError("the two rankings must cover the same queries in the same order")
    k = min(k, exact.depth, ann.depth)
    out = np.zeros(len(exact.query_ids), dtype=np.float64)
    for row in range(len(out)):
        truth = exact.indices[row, :k]
        truth = truth[truth >= 0]
        if len(truth) == 0:
            out[row] = 1.0
            continue
        out[row] = np.isin(truth, ann.indices[row, :k]).sum() / len(truth)
    return out


def index_report(
    options: KindOptions, stats: IndexStats, proof: IndexProof, ann: Ranking,
    exact: Ranking, metrics: dict[str, dict[str, float | None]], *,
    ks: Sequence[int] = (10, 100),
) -> dict[str, Any]:
    """The manifest's ``index`` entry of a variant searched through an index kind other
    than exact: its options, costs and proof, recall@k against the exact search of the
    same vectors, and each measure's loss split.

    ``metrics`` maps a measure to ``{"reference": mean of the reference's exact run,
    "exact": this variant's exact run, "ann": this variant's run through the index}``;
    quantization loss = reference − exact, index loss = exact − ann (positive = worse,
    for measures where higher is better).
    """
    recall = {f"recall@{k}": float(recall_at(ann, exact, k).mean()) if len(exact.query_ids)
              else None for k in ks if k <= exact.depth}
    split = {}
    for name, m in metrics.items():
        ref, ex, an = m.get("reference"), m.get("exact"), m.get("ann")
        split[name] = {**m,
                       "quantization_loss": None if ref is None or ex is None else ref - ex,
                       "index_loss": None if ex is None or an is None else ex - an}
    return {"type": "ann", "kind": options.kind, **options.record(), "bytes": stats.bytes,
            "build_s": stats.build_s, **stats.detail, **recall, "loss": split,
            "proof": proof.model_dump()}
