"""The results contract as types: ``manifest.json`` and ``summary.json`` of a run folder.

``execute.summarize.build_summary`` builds the summary as these models, and
``RunFolder.write_summary`` takes a :class:`RunSummary` and validates it again as it writes
(what is written is what every reader accepts); the manifest, which grows while the run
goes, is validated as :class:`RunManifest` on every write. Every reader parses a folder
through them (``results.RunFolder.read_summary`` /
``read_manifest``). A file edited by hand, cut short or written by another program
therefore fails here, once, as bad input naming the file and the field, instead of as an
``AttributeError`` in whichever report touched the damaged key first.

Parts are closed (``extra="forbid"``) except where a writer really stores an open
mapping: backend descriptions, encoding settings, timings, index figures (their keys
depend on the index kind), dataset sources, the recipe. What reports read of those is
typed in :mod:`evalq.results.records` (and ``RecipeRecord``), checked as a file is parsed.
Numbers that can be NaN are ``float | None`` (``results.clean_json`` writes NaN as null).

``SCHEMA_VERSION`` stays 1 (evalq 0.1 wrote it; nothing here changes the format).
:func:`migrate` is the one place where an older layout would be upgraded before parsing.
``write_json_schema`` exports the JSON Schema the reference docs are generated from.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field, ValidationError, field_validator

from evalq.core import atomicio
from evalq.core.encodestats import EncodeStats
from evalq.core.errors import InputError
from evalq.results.dbpart import DatabaseStage
from evalq.results.hostpart import HostPart
from evalq.results.parts import (
    Attribution,
    BetweenCompositions,
    Combination,
    CompositionMetric,
    CompositionRow,
    CosineRange,
    CosineStats,
    Dependence,
    DepthCost,
    EncodeSection,
    Fidelity,
    Figure,
    FirstStageCost,
    GateCheck,
    GateResult,
    LossSplit,
    MeanEntry,
    MetricEntry,
    MetricRange,
    PairedEntry,
    Part,
    PipelineCost,
    PipelineDataset,
    PipelineDepth,
    PipelineSummary,
    RecipeRecord,
    RecipeRecordGate,
    RecipeRecordReport,
    RecipeRecordStats,
    RecipeRecordVariant,
    RecipeRecordVectors,
    RerankerCost,
    RerankerInfo,
    ScoreDrift,
    SensitivitySection,
    SensitivitySlice,
    SweepPoint,
    SweepSummary,
    TextsPart,
    VectorFidelity,
    VectorProbe,
    Verdict,
)
from evalq.results.records import (
    BackendQuantization,
    BackendRecord,
    DatasetRecord,
    EncodeFigures,
    EnvironmentRecord,
    IndexRecord,
    ManifestDataset,
    ManifestVariant,
    ModelRecord,
    SourceRecord,
    TimingsRecord,
    reads_as,
)
from evalq.results.searchpart import SearchSummary

# Every model of the results files (evalq.results.parts re-exported): import them from here.
__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Attribution",
    "BackendQuantization",
    "BackendRecord",
    "BetweenCompositions",
    "Combination",
    "CompositionMetric",
    "CompositionRow",
    "CosineRange",
    "CosineStats",
    "DatasetRecord",
    "DatasetSummary",
    "Dependence",
    "DepthCost",
    "EncodeFigures",
    "EncodeSection",
    "EncodeStats",
    "EnvironmentRecord",
    "Fidelity",
    "Figure",
    "FirstStageCost",
    "GateCheck",
    "GateResult",
    "IndexRecord",
    "LoadDecision",
    "LoadKnee",
    "LoadSummary",
    "LoadVariant",
    "LoadWorkload",
    "LossSplit",
    "ManifestDataset",
    "ManifestVariant",
    "MeanEntry",
    "MetricEntry",
    "MetricRange",
    "ModelRecord",
    "PairedEntry",
    "Part",
    "PipelineCost",
    "PipelineDataset",
    "PipelineDepth",
    "PipelineSummary",
    "RecipeRecord",
    "RecipeRecordGate",
    "RecipeRecordReport",
    "RecipeRecordStats",
    "RecipeRecordVariant",
    "RecipeRecordVectors",
    "RerankerCost",
    "RerankerInfo",
    "RunManifest",
    "RunSummary",
    "ScoreDrift",
    "SensitivitySection",
    "SensitivitySlice",
    "SettingDifference",
    "SourceRecord",
    "StatsPart",
    "SuiteGate",
    "SuitePart",
    "SweepPoint",
    "SweepSummary",
    "TextsPart",
    "TimingsRecord",
    "VariantDatasetEntry",
    "VariantSummary",
    "VectorFidelity",
    "VectorProbe",
    "Verdict",
    "json_schemas",
    "migrate",
    "parse",
    "parse_load_summary",
    "parse_manifest",
    "parse_part",
    "parse_summary",
    "write_json_schema",
]

SCHEMA_VERSION = 1
P = TypeVar("P", bound=Part)

# -- per dataset, per variant ------------------------------------------------------------

class VariantDatasetEntry(Part):
    """``summary.datasets.<dataset>.variants.<variant>``."""

    role: Literal["reference", "candidate"]
    verdict: Verdict | None = None  # the per-variant verdict, where a writer adds it here
    metrics: dict[str, MetricEntry]
    reference_metrics: dict[str, MeanEntry] | None = None
    vectors: VectorFidelity | None = None
    batch_sensitivity: SensitivitySection | None = None
    gate: GateResult | None = None
    encode: EncodeSection = Field(default_factory=EncodeSection)
    # open: its keys depend on the index kind
    index: Annotated[dict[str, Any] | None, reads_as(IndexRecord)] = None
    # Model, index and end-to-end loss per measure, for a candidate searched through an
    # index (issue 30); absent for other variants and in folders written before it.
    losses: dict[str, LossSplit] | None = None
    # A swept search-time parameter as a curve, for a candidate whose index sets sweep:
    # (issue 30); absent otherwise.
    sweep: SweepSummary | None = None

    @property
    def index_record(self) -> IndexRecord | None:
        """The index record as a report reads it (None when the entry has none)."""
        return None if self.index is None else IndexRecord.model_validate(self.index)


class DatasetSummary(Part):
    queries: int
    variants: dict[str, VariantDatasetEntry]
    documents: int | None = None


class SettingDifference(Part):
    """An encoding setting of a candidate that differs from the reference's."""

    variant: Any
    reference: Any


class VariantSummary(Part):
    """``summary.variants.<variant>``: the variant over every dataset. ``passed`` is null
    for the reference (and, from the ungated fix on, for a candidate without a gate);
    ``verdict`` is written from that fix on."""

    role: Literal["reference", "candidate"]
    passed: bool | None = None
    weight_bytes: int | float | None = None
    settings_differ: dict[str, SettingDifference] | None = None
    startup_s: float | None = None
    total_s: float | None = None
    peak_rss_mb: float | None = None
    children_peak_rss_mb: float | None = None
    peak_rss_method: str | None = None
    verdict: Verdict | None = None
    suite_checks: list[GateCheck] | None = None
    # Retriever-stage pipeline gates that judge this dense candidate (scoring folds them in).
    pipeline_checks: list[GateCheck] | None = None


class StatsPart(Part):
    method: str | None = None
    min_nonzero: int | None = None
    confidence: float | None = None
    resamples: int | None = None
    seed: int | None = None


class SuiteGate(Part):
    gate: str
    over: str


class SuitePart(Part):
    datasets: list[str] = Field(default_factory=list)
    gates: list[SuiteGate] = Field(default_factory=list)


# -- the two files -----------------------------------------------------------------------

class RunSummary(Part):
    """``summary.json``: written last, so its presence means the run finished."""

    schema_version: int
    recipe: str
    reference: str
    passed: bool
    failed_gates: list[str] = Field(default_factory=list)
    stats: StatsPart | None = None
    suite: SuitePart | None = None
    datasets: dict[str, DatasetSummary]
    variants: dict[str, VariantSummary]
    warnings: list[str] = Field(default_factory=list)
    pipelines: dict[str, PipelineSummary] | None = None
    host: HostPart | None = None  # what the verdicts were certified on
    search: SearchSummary | None = None  # a grid search (recipe `search:`)

    def entry(self, dataset: str, variant: str) -> VariantDatasetEntry | None:
        ds = self.datasets.get(dataset)
        return None if ds is None else ds.variants.get(variant)


class RunManifest(Part):
    """``manifest.json``: what ran. Written at the start (``status: running``), after the
    variants, and at the end or when the run stopped (``rundir.record_stop``)."""

    schema_version: int
    evalq_version: str | None = None
    git_revision: str | None = None
    versions: dict[str, str] = Field(default_factory=dict)
    environment: Annotated[dict[str, Any], reads_as(EnvironmentRecord)] = Field(
        default_factory=dict)
    recipe_file: str | None = None
    recipe: dict[str, Any] = Field(default_factory=dict)  # the recipe as run (config.Recipe)
    options: dict[str, Any] = Field(default_factory=dict)
    model: Annotated[dict[str, Any], reads_as(ModelRecord)] = Field(default_factory=dict)
    datasets: dict[str, ManifestDataset] = Field(default_factory=dict)
    started: str | None = None
    status: Literal["running", "finished", "failed", "interrupted"] | None = None
    http_probe: dict[str, Any] = Field(default_factory=dict)
    executor: dict[str, Any] | None = None
    variants: dict[str, ManifestVariant] = Field(default_factory=dict)
    pipelines: dict[str, dict[str, Any]] | None = None  # backends and timings per reranker
    finished: str | None = None
    signal: str | None = None
    error: str | None = None
    error_kind: str | None = None
    crash_log: str | None = None
    stopped: str | None = None
    host: HostPart | None = None

    @field_validator("recipe")
    @classmethod
    def _readable_recipe(cls, value: dict[str, Any]) -> dict[str, Any]:
        """The parts of the stored recipe that reports read are checked when the file is
        parsed: a hand-edited value of the wrong type there is a damaged file (exit 2
        naming it), not an error met later by a report (which would be evalq's bug)."""
        RecipeRecord.model_validate(value, strict=True)
        return value

    @property
    def recipe_record(self) -> RecipeRecord:
        """The stored recipe as a report reads it (:class:`RecipeRecord`)."""
        return RecipeRecord.model_validate(self.recipe)

    @property
    def model_record(self) -> ModelRecord:
        return ModelRecord.model_validate(self.model)

    @property
    def environment_record(self) -> EnvironmentRecord:
        return EnvironmentRecord.model_validate(self.environment)


# -- versions, parsing, schema export -----------------------------------------------------

# Steps from an older schema_version to the next one: {old version: upgrade}. Version 1
# (evalq 0.1) is the current layout, so it needs no step; the next format change adds one
# here and bumps SCHEMA_VERSION.
MIGRATIONS: dict[int, Callable[[dict[str, Any]], dict[str, Any]]] = {}


def migrate(data: dict[str, Any], file: Path) -> dict[str, Any]:
    """``data`` (a manifest or summary as read) upgraded to ``SCHEMA_VERSION``."""
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise InputError(message=f"schema_version {version!r} is not a version number",
                         file=file, field="schema_version",
                         fix="rerun 'evalq run' to write the folder again")
    while version < SCHEMA_VERSION and version in MIGRATIONS:
        data = MIGRATIONS[version](data)
        version = data["schema_version"]
    if version != SCHEMA_VERSION:
        raise InputError(message=f"schema_version {version} is not supported "
                         f"(this evalq reads {SCHEMA_VERSION})", file=file,
                         field="schema_version", fix="use the evalq version that wrote it")
    return data


def _field(error: Mapping[str, Any]) -> str:
    return ".".join(str(p) for p in error.get("loc", ()))


def parse(model: type[P], data: dict[str, Any], file: Path) -> P:
    """``data`` (a versioned file: :func:`migrate` first) as ``model``."""
    return parse_part(model, migrate(data, file), file)


def parse_part(model: type[P], data: dict[str, Any], file: Path) -> P:
    """``data`` as ``model``; a wrong type, a null where a value belongs or an unknown
    key is bad input (exit 2) naming the file and the field."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        raise InputError(message=f"{first['msg']}{more}", file=file, field=_field(first),
                         fix="rerun 'evalq run' (or 'evalq gate') to write the folder "
                         "again; the file was edited or written by another program"
                         ) from None


def parse_summary(data: dict[str, Any], file: Path) -> RunSummary:
    return parse(RunSummary, data, file)


def parse_manifest(data: dict[str, Any], file: Path) -> RunManifest:
    return parse(RunManifest, data, file)


def json_schemas() -> dict[str, dict[str, Any]]:
    """The JSON Schema of each results file, by file name."""
    return {"summary.json": RunSummary.model_json_schema(),
            "manifest.json": RunManifest.model_json_schema(),
            "load-summary.json": LoadSummary.model_json_schema()}


def write_json_schema(folder: str | Path) -> list[Path]:
    """Write ``summary.schema.json``, ``manifest.schema.json`` and
    ``load-summary.schema.json`` into ``folder`` (the reference docs are generated from
    them); returns the paths."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, schema in json_schemas().items():
        path = out / name.replace(".json", ".schema.json")
        atomicio.write_text(path, json.dumps(schema, indent=2, sort_keys=True) + "\n")
        paths.append(path)
    return paths


# -- the load test (load/summary.json, load.command; its own LOAD_SCHEMA_VERSION) ---------

class LoadKnee(Part):
    per_s: float | None
    unit: str
    lower_bound: bool
    series: str | None = None
    reason: str
    level: float | None = None
    stopped_by: str | None = None  # the first failing step of its series: verdict, why


class LoadWorkload(Part):
    kind: str
    mode: str
    slo_p99_ms: float | None = None
    steps: list[dict[str, Any]] = Field(default_factory=list)
    knee: LoadKnee | None = None


class LoadVariant(Part):
    backend: str
    workloads: dict[str, LoadWorkload] = Field(default_factory=dict)
    database: DatabaseStage | None = None  # a database stage's (execute.load.dbstage)
    startup_s: float | None = None
    server: dict[str, Any] | None = None
    url: str | None = None
    started_by_evalq: bool | None = None
    server_settings: dict[str, Any] | None = None
    parity: dict[str, Any] | None = None
    # probes under load (execute.load.quality): probe set, floor, source; steps[].quality
    quality: dict[str, Any] | None = None
    knees: dict[str, dict[str, Any]] | None = None
    plan: dict[str, Any] | None = None


class LoadDecision(Part):
    variant: str
    quality: str
    parity: str
    replicas: int | None
    feasible: bool
    dollars_per_hour: float | None
    dollars_per_million_queries: float | None
    sentence: str
    format: str | None = None  # what the server ran (execute.load.formats.served_format)
    knees: dict[str, dict[str, Any]] | None = None  # by workload kind, as in the variant


class LoadSummary(Part):
    """``load/summary.json``: rewritten after every step, so ``status`` says whether the
    load test is running, stopped or finished."""

    schema_version: int
    recipe: str
    recipe_file: str | None = None
    status: Literal["running", "finished", "failed", "interrupted"]
    started: str | None = None
    git_revision: str | None = None
    versions: dict[str, str] = Field(default_factory=dict)
    environment: dict[str, Any] = Field(default_factory=dict)
    load: dict[str, Any] = Field(default_factory=dict)  # the recipe's load: block, dumped
    capacity: dict[str, Any] | None = None
    skipped_variants: dict[str, str] = Field(default_factory=dict)
    variants: dict[str, LoadVariant] = Field(default_factory=dict)
    quality_source: str | None = None
    decision: list[LoadDecision] = Field(default_factory=list)
    recommendation: str | None = None
    broken: list[str] = Field(default_factory=list)
    finished: str | None = None
    stopped: str | None = None
    error: str | None = None
    replanned: str | None = None
    host: HostPart | None = None


def parse_load_summary(data: dict[str, Any], file: Path) -> LoadSummary:
    """``load/summary.json`` as :class:`LoadSummary` (its version is checked by the
    caller, ``load.results.LoadFolder``)."""
    try:
        return LoadSummary.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise InputError(message=str(first["msg"]), file=file, field=_field(first),
                         fix="rerun 'evalq load' to write the folder again; the file was "
                         "edited or written by another program") from None
