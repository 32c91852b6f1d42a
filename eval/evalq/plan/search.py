"""The recipe's ``search:`` section, declared, and the grid it spans (issue 31).

A search crosses weight variants (the recipe's own variants, each encoded once) with
output-vector precisions, Matryoshka widths and index options, and certifies the
cheapest combination with honest error control (:mod:`evalq.decide.search`): the queries
are split once into an explore and a confirm part, the explore part prunes the grid to a
few survivors, and Holm's step-down confirms those on the confirm part.

:class:`SearchSection` is what the recipe composes; :class:`SearchPlan` is what the plan
carries and the executor (:mod:`evalq.execute.search`) reads: the combinations in a fixed
order with their names, the encodings they need, and the error-control figures the plan
prints. Nothing here loads a model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, SerializeAsAny, field_validator, model_validator

from evalq.core.errors import InputError
from evalq.core.options import StrictOptions
from evalq.decide.drop_evidence import MIN_QUERIES
from evalq.decide.search import split_queries
from evalq.encode.rates import MeasuredRate
from evalq.engines.options import Rescore
from evalq.plan.variant import SearchedVariant
from evalq.retrieve.kinds import KindOptions
from evalq.retrieve.registry import DEFAULT_VECTOR_KIND, EXACT_KIND, INDEX_KINDS

SearchCost = Literal["weight_bytes", "index_bytes", "docs_per_s", "queries_per_s",
                     "dollars_per_million_queries"]

# The throughput the plan's time estimate assumes for a weight variant no run has measured
# on this host yet (evalq.encode.rates keeps the measured ones): texts per second on a
# CPU (the quickstart slice encodes at about 200/s with MiniLM on these 2 cores; half
# that leaves room for slower formats), and the seconds one combination's derivation,
# search and measures take on a slice.
ASSUMED_TEXTS_PER_S = 100.0
ASSUMED_COMBINATION_S = 0.5


class VectorChoice(StrictOptions):
    """One value of the ``vectors`` axis: what the index stores and whether it rescores
    (:class:`evalq.retrieve.vectorquant.VectorSpec`)."""

    quantize: Literal["none", "int8", "binary"] = "none"
    rescore: Rescore | None = None

    @model_validator(mode="after")
    def _rescore_needs_codes(self) -> VectorChoice:
        if self.rescore is not None and self.quantize == "none":
            raise ValueError("search.vectors: rescore needs quantize int8 or binary "
                             "(float vectors have nothing to rescore)")
        return self

    @property
    def label(self) -> str:
        """``none``, ``int8``, ``int8+rescore4``, ``binary+rescore10``."""
        return self.quantize + (f"+rescore{self.rescore}" if self.rescore else "")


class SplitOptions(StrictOptions):
    """``search.split``: the share of queries that explores, and the split's seed."""

    explore: float = Field(default=0.5, gt=0, lt=1)
    seed: int = Field(default=0, ge=0)  # numpy's generators refuse a negative seed


class SearchSection(StrictOptions):
    """``search:`` of a recipe: the axes, the cost minimized, the error control."""

    # names of the recipe's variants (reference or candidates), each encoded once
    weights: list[str] = Field(min_length=1)
    vectors: list[VectorChoice] = Field(default_factory=lambda: [VectorChoice()],
                                        min_length=1)
    # Matryoshka widths (truncated, then renormalized); left out: the model's width
    # strict: `true` is not the width 1, nor "256" a width (a quoted number is a slip)
    dims: list[Annotated[int, Field(ge=1, strict=True)]] | None = Field(default=None,
                                                                      min_length=1)
    # index kinds' options (a registered kind that indexes vectors); left out: exact
    index: list[SerializeAsAny[KindOptions]] | None = Field(default=None, min_length=1)
    cost: SearchCost = "index_bytes"
    # family-wise, one-sided; left out: (1 - stats.confidence) / 2, the gates' own
    alpha: float | None = Field(default=None, gt=0, lt=0.5)
    survivors: int = Field(default=3, ge=1)  # the confirm family's size at most
    split: SplitOptions = SplitOptions()
    max_combinations: int = Field(default=60, ge=1)

    @field_validator("index", mode="before")
    @classmethod
    def _registered_kinds(cls, value: Any) -> Any:
        if value is None or not isinstance(value, list):
            return value
        return [INDEX_KINDS.parse(v, "vectors", DEFAULT_VECTOR_KIND) for v in value]

    @model_validator(mode="after")
    def _distinct(self) -> SearchSection:
        axes: tuple[tuple[str, list[str]], ...] = (
            ("weights", self.weights), ("dims", [str(d) for d in self.dims or []]),
            ("vectors", [v.label for v in self.vectors]))
        for axis, values in axes:
            repeated = sorted({str(v) for v in values if values.count(v) > 1})
            if repeated:
                raise ValueError(f"search.{axis} repeats {', '.join(repeated)}: each value "
                                 "once")
        swept = [i for i, o in enumerate(self.index or []) if getattr(o, "sweep", None)]
        if swept:  # the search derived one point per option and dropped the sweep silently
            raise ValueError(f"search.index option {swept[0]} has a sweep; a search's index "
                             "option is one point of the grid: list each swept value as an "
                             "index option of its own (or sweep it in a candidate)")
        options = [o.model_dump() for o in self.index or []]
        repeated_at = [i for i, o in enumerate(options) if o in options[:i]]
        if repeated_at:
            raise ValueError(f"search.index repeats option {repeated_at[0]} "
                             f"({options[repeated_at[0]]}): each value once")
        return self


@dataclass(frozen=True)
class Combination:
    """One point of the grid. ``dims`` None: the model's full width. ``index`` None:
    exact search over what ``vectors`` stores."""

    weights: str
    vectors: VectorChoice
    dims: int | None
    index: KindOptions | None
    index_label: str | None

    @property
    def name(self) -> str:
        """``s.<weights>.<vectors>.<dims>[.<index>]``: its per-query and run files' name."""
        parts = ["s", self.weights, self.vectors.label, str(self.dims or "full")]
        if self.index_label:
            parts.append(self.index_label)
        return ".".join(parts)


# Where an index lives, not how it searches: left out of an index option's label.
_PLACE = frozenset({"kind", "dsn", "data_dir", "allow_root", "path", "sweep"})


def index_label(options: KindOptions, i: int) -> str:
    """A short, file-safe name for one value of the ``index`` axis: the kind, its factory
    and its search parameters (FAISS), or the settings another kind was given (pgvector's
    ``m``, ``ef_search``...), so one index searched at two settings (HNSW32 at efSearch
    16 and 64) names two combinations; the option's place on the axis when it sets
    nothing that tells it apart."""
    factory = getattr(options, "factory", None)
    if isinstance(factory, str):
        text = f"{options.kind}-{factory}"
        search = getattr(options, "search", None)
        if isinstance(search, BaseModel):
            text += "".join(f"-{k}{v}" for k, v in sorted(
                search.model_dump(exclude_none=True).items()))
    else:
        settings = {k: v for k, v in options.model_dump(exclude_defaults=True).items()
                    if k not in _PLACE and isinstance(v, str | int | float)}
        text = options.kind + ("".join(f"-{k}{v}" for k, v in settings.items())
                               if settings else f"-{i}")
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text)


def index_labels(options: list[KindOptions]) -> list[str]:
    """:func:`index_label` of each value, made distinct: two FAISS options with one
    factory (searched at two ``nprobe``) or factories that differ only in punctuation
    would share a name, and so one run and per-query file that the second overwrites.
    A label that repeats gets its position appended; a unique one is kept as it was, so
    results folders written before read back under the same names."""
    labels = [index_label(o, i) for i, o in enumerate(options)]
    return [label if labels.count(label) == 1 else f"{label}-{i}"
            for i, label in enumerate(labels)]


@dataclass(frozen=True)
class SearchPlan:
    """The search as the run does it: the section as written, the combinations in grid
    order, the encodings they need, and the figures the plan prints."""

    section: SearchSection
    combinations: tuple[Combination, ...]
    skipped: int  # index options paired with quantized vectors: not searched (see grid)
    datasets: int
    alpha: float  # family-wise, one-sided
    texts_per_weight: int | None  # documents + queries one encoding reads, when known
    # Each weight variant's rate last measured on this host (evalq.encode.rates); a
    # weight variant missing here is estimated at ASSUMED_TEXTS_PER_S.
    rates: Mapping[str, MeasuredRate] = field(default_factory=dict)
    # weight variants that borrow both sides (documents: and queries: from other variants
    # or files): they build no engine, so their combinations cost no encoding
    reused: tuple[str, ...] = ()

    @property
    def encodings(self) -> int:
        """One per weight variant and dataset, none for a weight variant that borrows
        both sides: every width and precision is derived from one full-width float
        encoding (truncation renormalizes a prefix; quantization reads the float
        vectors), and one whose sides are borrowed reads vectors that exist already."""
        return (len(self.section.weights) - len(self.reused)) * self.datasets

    @property
    def per_test_alpha(self) -> float:
        """Holm's first round: every survivor decided at alpha / family size (at most the
        grid's size: `survivors: 1000` over 8 combinations is a family of 8 at most)."""
        return self.alpha / self.family

    @property
    def family(self) -> int:
        """The confirm family's largest size: ``survivors``, or the grid when smaller."""
        return min(self.section.survivors, len(self.combinations))

    def of_weights(self, weights: str) -> tuple[Combination, ...]:
        return tuple(c for c in self.combinations if c.weights == weights)

    def rate(self, weights: str) -> float:
        """Texts/s the estimate takes for one weight variant: measured, else assumed."""
        measured = self.rates.get(weights)
        return measured.texts_per_s if measured is not None else ASSUMED_TEXTS_PER_S

    def estimate_s(self) -> float | None:
        """Seconds the search adds: each weight variant's encodings at its measured rate
        on this host (:data:`ASSUMED_TEXTS_PER_S` when none was measured yet), and
        :data:`ASSUMED_COMBINATION_S` per combination; None without limits."""
        if self.texts_per_weight is None:
            return None
        encoding = sum(self.datasets * self.texts_per_weight / self.rate(w)
                       for w in self.encoded())
        return encoding + len(self.combinations) * self.datasets * ASSUMED_COMBINATION_S

    def encoded(self) -> list[str]:
        """The weight variants the search encodes (not those that borrow both sides)."""
        return [w for w in self.section.weights if w not in self.reused]

    def rate_words(self) -> str:
        """Where the estimate's rates come from, for the plan's line."""
        measured = [f"{w} {_rate(r.texts_per_s)}/s" for w, r in self.rates.items()
                    if w in self.encoded()]
        assumed = [w for w in self.encoded() if w not in self.rates]
        parts = []
        if measured:
            klass = next(iter(self.rates.values())).numerics_class
            parts.append(f"measured on this host ({klass}): " + _some(measured))
        if assumed:
            parts.append(f"assumed {ASSUMED_TEXTS_PER_S:.0f} texts/s for " + _some(assumed)
                         + " (no run measured them here yet)")
        return "; ".join(parts) or "none needed (no weight variant encodes)"

    def describe(self) -> list[str]:
        """The plan printout's lines for the search."""
        s = self.section
        axes = [f"{len(s.weights)} weights ({_some(s.weights)})",
                f"{len(s.vectors)} vectors ({_some([v.label for v in s.vectors])})",
                f"{len(s.dims or [None])} dims ("
                + (_some([str(d) for d in s.dims]) if s.dims else "the model's width") + ")"]
        if s.index:
            axes.append(f"{len(s.index)} index options")
        lines = [f"search: {len(self.combinations)} combinations = " + " × ".join(axes)
                 + (f" ({self.skipped} index × quantized pairs skipped)" if self.skipped
                    else ""),
                 f"  encodings: {self.encodings} (one per weight variant × dataset; dims "
                 "and vector precision are derived from it, nothing is re-encoded)"]
        if self.reused:
            lines.append(f"  {_some(list(self.reused))} "
                         + ("reuses" if len(self.reused) == 1 else "reuse")
                         + " both sides (documents and queries from other variants or "
                         "files): 0 encodings, no engine is built")
        estimate = self.estimate_s()
        if estimate is not None:
            lines.append(f"  estimate: about {estimate:.0f} s for the search's encodings and "
                         f"combinations ({self.texts_per_weight} texts per encoding; "
                         f"rates {self.rate_words()}; {ASSUMED_COMBINATION_S} s per "
                         "combination)")
        else:
            lines.append("  estimate: unknown (no max_queries / max_docs: the corpus size "
                         "is read at run time)")
        lines += [f"  split: explore {s.split.explore:g} / confirm {1 - s.split.explore:g} "
                  f"of the queries, seed {s.split.seed}; cost: {s.cost} (lower is cheaper"
                  + ("; throughput is costed as its inverse" if s.cost.endswith("_per_s")
                     else "") + ")",
                  f"  error control: Holm over at most {self.family} survivors, family-wise "
                  f"one-sided alpha {self.alpha:g}, per-test alpha {self.per_test_alpha:.4g} "
                  "at the first round"]
        return lines


def _rate(texts_per_s: float) -> str:
    """A measured rate for the plan's line: 0.4 texts/s printed as '0', a rate of none."""
    return f"{texts_per_s:.0f}" if texts_per_s >= 10 else f"{texts_per_s:.2g}"


def _some(values: list[str], shown: int = 8) -> str:
    """An axis's values for the plan's one line: a grid of 384 widths × 1,000 precisions
    printed every value, a line of thousands of characters."""
    if len(values) <= shown:
        return ", ".join(values)
    return ", ".join(values[:shown - 2]) + f", … ({len(values) - shown + 1} more), " + values[-1]


def search_plan(section: SearchSection, confidence: float, datasets: int,
                texts_per_weight: int | None = None,
                rates: Mapping[str, MeasuredRate] | None = None,
                variants: Sequence[SearchedVariant] = ()) -> SearchPlan:
    """The plan of ``section`` for a recipe of ``datasets`` datasets whose gates decide at
    ``confidence`` (the run's plan, or a results folder's stored recipe for ``evalq gate``),
    with the weight variants' measured ``rates`` for its time estimate; ``variants``: the
    recipe's, whose borrowed sides say which weights encode nothing."""
    combinations, skipped = build_grid(section)
    reused = tuple(v.name for v in variants if v.name in section.weights
                   and v.documents is not None and v.queries is not None)
    return SearchPlan(section=section, combinations=combinations, skipped=skipped,
                      datasets=datasets, alpha=default_alpha(section, confidence),
                      texts_per_weight=texts_per_weight, rates=dict(rates or {}),
                      reused=reused)


def build_grid(section: SearchSection) -> tuple[tuple[Combination, ...], int]:
    """The combinations in grid order (weights, then vectors, dims, index), and how many
    index × quantized-vector pairs were skipped: an index kind stores its own form of
    the vectors (a FAISS factory covers SQ8 / PQ), as a variant's ``index`` and
    ``vectors.quantize`` exclude each other."""
    indexes: list[tuple[KindOptions | None, str | None]] = [(None, None)]
    if section.index:
        indexes = [(None if o.kind == EXACT_KIND else o,
                     None if o.kind == EXACT_KIND else label)
                    for o, label in zip(section.index, index_labels(section.index),
                                        strict=True)]
    out, skipped = [], 0
    for weights in section.weights:
        for vectors in section.vectors:
            widths: list[int | None] = [*section.dims] if section.dims else [None]
            for dims in widths:
                for options, label in indexes:
                    if options is not None and vectors.quantize != "none":
                        skipped += 1
                        continue
                    out.append(Combination(weights, vectors, dims, options, label))
    return tuple(out), skipped


def default_alpha(section: SearchSection, confidence: float) -> float:
    """The family-wise one-sided level: the section's, or the gates' own one-sided level
    ((1 - confidence) / 2: a two-sided 95 % interval's lower bound is a 2.5 % test)."""
    return section.alpha if section.alpha is not None else round((1.0 - confidence) / 2.0, 12)


def check_split(section: SearchSection, queries: int, where: str = "search.split") -> None:
    """Raise :class:`InputError` when ``queries`` split as written leave fewer than
    :data:`evalq.decide.drop_evidence.MIN_QUERIES` to confirm (below that a gate's pass
    is inconclusive, so nothing could ever be certified)."""
    split_queries([str(i) for i in range(queries)], seed=section.split.seed,
                  explore_fraction=section.split.explore, min_confirm=MIN_QUERIES,
                  where=where)


def check_dims(section: SearchSection, width: int, where: str = "search.dims") -> None:
    """Matryoshka widths are prefixes of the model's vectors: none may exceed them."""
    wide = [d for d in section.dims or [] if d > width]
    if wide:
        raise InputError(message=f"search.dims {', '.join(map(str, wide))} exceed the "
                         f"model's width {width}", field=where,
                         fix=f"use widths from 1 to {width} (e.g. {width} and {width // 2})")
