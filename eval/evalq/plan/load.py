"""The recipe's ``load:`` and ``capacity:`` sections, declared and typed.

They hang off :class:`evalq.recipe.schema.Recipe` as two optional fields, so a recipe without
them is unchanged and ``evalq validate`` checks them like every other key (unknown keys
are errors with a did-you-mean). What needs the rest of the recipe (a variant name that
exists, a URL on loopback, a rerank route) is checked by
:func:`evalq.recipe.plan_load.check_load` before any server starts. The plan carries both
sections to the load test (``evalq.execute.load``), which reads them from here.

It imports only evalq's core, the schedule bounds and the engines' declarations
(:data:`evalq.engines.options.PLACEHOLDERS`), so the recipe schema and the executors can
import it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from evalq.core.errors import RecipeValueError
from evalq.core.names import PathName
from evalq.core.options import StrictOptions
from evalq.engines.options import PLACEHOLDERS, EncoderVariant, used_placeholders
from evalq.plan.loadbudget import (
    MAX_DURATION_S,
    MAX_IN_FLIGHT,
    MAX_REQUESTS,
    MAX_RERANK_DEPTH,
    MAX_TIMEOUT_S,
    MAX_WARMUP_S,
    check_schedule,
)

# A number a user typed that becomes a schedule, a sleep or an allocation: never NaN or
# infinite (YAML reads ``.nan`` and ``.inf`` as floats), and positive where zero means
# nothing to send. Upper bounds come from :mod:`evalq.plan.loadbudget`.
Rate = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Clients = Annotated[int, Field(ge=1, le=MAX_IN_FLIGHT)]
Price = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Batch = Annotated[int, Field(ge=1, le=MAX_REQUESTS)]  # sent: min(batch, corpus, pool cap)


def _ascending(values: list[float] | list[int], what: str) -> None:
    if any(b <= a for a, b in pairwise(values)):
        raise ValueError(f"{what} must be strictly ascending (the sweep stops at the first "
                         f"step that breaks the SLO), got {values}")


class OpenLoop(StrictOptions):
    """Poisson arrivals at each rate in turn (requests/s): queueing shows, the generator
    never waits for the server."""

    rates: list[Rate] = Field(min_length=1, max_length=1000)

    @field_validator("rates")
    @classmethod
    def _rates(cls, value: list[float]) -> list[float]:
        _ascending(value, "rates")
        return value


class ClosedLoop(StrictOptions):
    """A fixed number of clients, each sending its next request when the last answered."""

    concurrency: list[Clients] = Field(min_length=1, max_length=1000)

    @field_validator("concurrency")
    @classmethod
    def _concurrency(cls, value: list[int]) -> list[int]:
        _ascending(value, "concurrency")
        return value


WorkloadKind = Literal["query", "ingest", "rerank"]


class Workload(StrictOptions):
    """One traffic shape: what a request carries and how the sweep offers it."""

    name: PathName
    kind: WorkloadKind
    slo_p99_ms: float = Field(gt=0, le=MAX_TIMEOUT_S * 1000, allow_inf_nan=False)
    open_loop: OpenLoop | None = None
    closed_loop: ClosedLoop | None = None
    # ingest: texts per request, each swept in turn
    batch_sizes: list[Batch] | None = Field(default=None, max_length=1000)
    # rerank: candidates per request, and the route that scores them
    depth: int | None = Field(default=None, ge=1, le=MAX_RERANK_DEPTH)
    endpoint: str | None = None

    @model_validator(mode="after")
    def _shape(self) -> Workload:
        if (self.open_loop is None) == (self.closed_loop is None):
            raise ValueError(f"workload '{self.name}' needs exactly one of open_loop "
                             "{rates: [...]} or closed_loop {concurrency: [...]}")
        if self.kind == "ingest":
            if not self.batch_sizes:
                raise ValueError(f"ingest workload '{self.name}' needs batch_sizes, e.g. [8, 32]")
            if any(b < 1 for b in self.batch_sizes):
                raise ValueError(f"batch_sizes must be at least 1, got {self.batch_sizes}")
        elif self.batch_sizes is not None:
            raise ValueError("batch_sizes applies to ingest workloads only")
        if self.kind == "rerank":
            if self.depth is None:
                raise ValueError(f"rerank workload '{self.name}' needs depth (candidates per "
                                 "request, e.g. 50)")
        elif self.depth is not None or self.endpoint is not None:
            raise ValueError("depth and endpoint apply to rerank workloads only")
        if self.endpoint is not None and not self.endpoint.startswith("/"):
            raise ValueError(f"endpoint is a path on the server, e.g. /rerank; got "
                             f"'{self.endpoint}'")
        return self

    @property
    def mode(self) -> Literal["open", "closed"]:
        return "open" if self.open_loop is not None else "closed"

    @property
    def levels(self) -> list[float]:
        if self.open_loop is not None:
            return list(self.open_loop.rates)
        assert self.closed_loop is not None
        return [float(c) for c in self.closed_loop.concurrency]


class Launch(StrictOptions):
    """A server evalq starts for an ``openai`` / ``tei`` variant (e.g. Infinity) and stops
    afterwards. The placeholders of :data:`evalq.engines.options.PLACEHOLDERS` in the
    command and ``cwd`` are filled from the variant (its model folder, its ``http.url``)
    and, for ``{onnx_dir}``, from the ``onnx`` variant ``onnx_from`` names, so the server
    runs the very graph that variant's verdict judged."""

    command: list[str] = Field(min_length=1)
    health: str = "/health"
    startup_timeout_s: float = Field(default=300, gt=0, le=MAX_DURATION_S, allow_inf_nan=False)
    env: dict[str, str] = Field(default_factory=dict)
    # where the server starts (Infinity's optimum engine finds its ONNX file by a name
    # relative to --model-id, so it is started inside {onnx_dir} with --model-id .)
    cwd: str | None = None
    onnx_from: str | None = None  # an onnx variant of the recipe: what {onnx_dir} serves

    @model_validator(mode="after")
    def _placeholders(self) -> Launch:
        try:
            used = used_placeholders([*self.command, self.cwd or ""])
        except ValueError as exc:
            raise ValueError(f"launch command {self.command}: {exc} (write a literal brace "
                             "as {{ or }})") from None
        names = ", ".join("{" + n + "}" for n in PLACEHOLDERS)
        for name in used:
            if name not in PLACEHOLDERS:
                raise ValueError(f"launch command uses {{{name}}}, which evalq does not fill; "
                                 f"placeholders: {names}")
        if "onnx_dir" in used and self.onnx_from is None:
            raise ValueError("launch command uses {onnx_dir} without onnx_from: name the onnx "
                             "variant whose graph the server runs, e.g. onnx_from: ort-int8")
        if self.onnx_from is not None and "onnx_dir" not in used:
            raise ValueError(f"onnx_from: {self.onnx_from} is set, but neither command nor cwd "
                             "uses {onnx_dir}, so the server would not run that graph")
        return self


class LoadQuality(StrictOptions):
    """``load.quality`` — probe texts with known idle vectors, sent during every step.

    ``probes`` queries and as many documents (drawn by ``load.seed``; 0 turns the check
    off) are embedded once at idle through the served endpoint; under load every
    ``1/share``-th request of a query or ingest series carries probe texts, and the
    answers are compared with the idle vectors. A step whose probe cosine falls under
    ``min_cosine`` (default: from the backend's declared batch-composition tolerance,
    see :func:`evalq.execute.load.quality.cosine_floor`), or whose top-``top_k`` overlap
    falls under ``min_overlap`` (default: reported only), does not count for the knee.
    """

    probes: int = Field(default=16, ge=0, le=1000)
    share: float = Field(default=0.1, gt=0, le=1, allow_inf_nan=False)
    top_k: int = Field(default=10, ge=1, le=1000)
    min_cosine: float | None = Field(default=None, ge=-1, le=1, allow_inf_nan=False)
    min_overlap: float | None = Field(default=None, ge=0, le=1, allow_inf_nan=False)


class LoadSection(StrictOptions):
    """``load:`` — how ``evalq load`` drives the served variants."""

    workloads: list[Workload] = Field(min_length=1)
    variants: list[str] | None = None  # default: every variant served over HTTP
    # variants whose index is a database (kind: pgvector, qdrant): the query workloads'
    # schedule also drives concurrent searches of that database, with the variant's query
    # vectors encoded beforehand (the database stage: evalq.execute.load.dbsearch)
    databases: list[str] = Field(default_factory=list)
    launch: dict[str, Launch] = Field(default_factory=dict)
    warmup_s: float = Field(default=2.0, ge=0, le=MAX_WARMUP_S, allow_inf_nan=False)
    duration_s: float = Field(default=10.0, gt=0, le=MAX_DURATION_S, allow_inf_nan=False)
    max_requests: int = Field(default=2000, ge=1, le=MAX_REQUESTS)
    timeout_s: float = Field(default=10.0, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)
    max_in_flight: int = Field(default=512, ge=1, le=MAX_IN_FLIGHT)
    error_budget: float = Field(default=0.01, ge=0, le=1, allow_inf_nan=False)
    stop_on_break: bool = True
    parity: bool = True
    seed: int = 0
    allow_hosts: list[str] = Field(default_factory=list)  # non-loopback hosts, named explicitly
    quality: LoadQuality = Field(default_factory=LoadQuality)  # answers under load vs idle

    @model_validator(mode="after")
    def _unique(self) -> LoadSection:
        names = [w.name for w in self.workloads]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"workload names must be unique; repeated: {', '.join(dupes)}")
        check_schedule(self)  # before anything is allocated: refused at recipe time
        return self


def check_launch_sources(section: LoadSection | None, backends: dict[str, str],
                         graph_backend: str) -> None:
    """Each ``onnx_from`` names a variant of the recipe (``backends``: name -> backend)
    whose backend is ``graph_backend``: it is what ``{onnx_dir}`` serves."""
    if section is None:
        return
    for name, spec in section.launch.items():
        source = spec.onnx_from
        if source is None:
            continue
        field = f"load.launch.{name}.onnx_from"
        if source not in backends:
            raise RecipeValueError(message=f"{field} names unknown variant '{source}'",
                                   field=field, fix=f"choose from {', '.join(backends)}")
        if backends[source] != graph_backend:
            raise RecipeValueError(
                message=f"{field}: variant '{source}' has backend '{backends[source]}'; "
                f"{{onnx_dir}} serves the graph of a backend {graph_backend} variant",
                field=field, fix=f"name a backend {graph_backend} variant, or add one, e.g. "
                f"{{name: ort-int8, backend: {graph_backend}, quantization: {{method: "
                "ort-dynamic-int8}}")


def launch_spec(section: LoadSection | None, name: str) -> Launch | None:
    """The ``load.launch`` entry of variant ``name``: the server evalq starts for it."""
    return section.launch.get(name) if section is not None else None


class CapacitySection(StrictOptions):
    """``capacity:`` — the demand a deployment must carry, and what a replica costs."""

    target_qps: float = Field(gt=0, allow_inf_nan=False)
    rerank_depth: int | None = Field(default=None, ge=1)
    ingest_docs_per_day: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    # dollars per replica-hour: one price, or per variant with an optional "default"
    dollars_per_replica_hour: Price | dict[str, Price] = 1.0
    # run replicas at most this busy
    headroom: float = Field(default=0.8, gt=0, le=1, allow_inf_nan=False)
    min_replicas: int = Field(default=1, ge=1)

    def price(self, variant: str) -> float | None:
        prices = self.dollars_per_replica_hour
        if isinstance(prices, int | float):
            return float(prices)
        value = prices.get(variant, prices.get("default"))
        return None if value is None else float(value)


@dataclass
class LoadPlan:
    """What ``evalq load`` drives: the section, the variants it chose (served over HTTP,
    narrowed by ``--only``) and why the others are skipped; made by
    :func:`evalq.recipe.plan_load.check_load` before any server starts."""

    section: LoadSection
    variants: Sequence[EncoderVariant]
    skipped: dict[str, str] = field(default_factory=dict)
    databases: Sequence[str] = ()  # the variants whose database stage runs (--only kept)
