"""The results contract as types: ``manifest.json`` and ``summary.json`` of a run folder.

The writers (``runner``, ``rundir``, ``scoring.build_summary``, ``pipeline``,
``sensitivity``) build plain dicts; these models describe exactly what they write, and
every reader parses a folder through them (``results.RunFolder.read_summary`` /
``read_manifest``). A file edited by hand, cut short or written by another program
therefore fails here, once, as bad input naming the file and the field, instead of as an
``AttributeError`` in whichever report touched the damaged key first.

Parts are closed (``extra="forbid"``) except where a writer really stores an open
mapping: backend descriptions, encoding settings, timings, encode statistics, index and
vector figures, dataset sources, the recipe (typed by ``config.Recipe``, not here).
Numbers that can be NaN are ``float | None`` (``results.clean_json`` writes NaN as null).

``SCHEMA_VERSION`` stays 1 (evalq 0.1 wrote it; nothing here changes the format).
:func:`migrate` is the one place where an older layout would be upgraded before parsing.
``write_json_schema`` exports the JSON Schema the reference docs are generated from.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evalq.core import atomicio
from evalq.core.errors import InputError
from evalq.results.hostpart import HostPart

SCHEMA_VERSION = 1
Figure = float | int | bool | str | None
Verdict = Literal["pass", "fail", "inconclusive", "ungated"]


class Part(BaseModel):
    """A closed part of a results file: an unknown key is a damaged or foreign file."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


# -- figures -----------------------------------------------------------------------------

class MeanEntry(Part):
    """A mean over queries with its bootstrap interval."""

    value: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int | None = None


class PairedEntry(Part):
    """A paired difference from the reference (``scoring._paired_entry``; pipeline
    entries carry no ``confidence``/``method``/``mde``, attribution's interaction no
    ``p_value``)."""

    delta: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    confidence: float | None = None
    method: str | None = None
    p_value: float | None = None
    mde: float | None = None


class MetricEntry(MeanEntry):
    vs_reference: PairedEntry | None = None


class GateCheck(Part):
    gate: str
    passed: bool
    verdict: str
    reason: str
    figures: dict[str, Figure] = Field(default_factory=dict)


class GateResult(Part):
    passed: bool
    checks: list[GateCheck] = Field(default_factory=list)


# -- batch sensitivity (sensitivity.apply_sensitivity) ------------------------------------

class CompositionMetric(Part):
    value: float | None
    delta: float | None = None


class CompositionRow(Part):
    id: str
    batch_tokens: int | None
    shuffle_seed: int | None
    passed: bool
    verdict: str
    verdicts: dict[str, str]
    metrics: dict[str, CompositionMetric]
    vectors: dict[str, Any] | None = None
    seconds: float | None = None


class MetricRange(Part):
    min: float | None
    max: float | None
    range: float | None
    of: str


class SensitivitySection(Part):
    dependence: dict[str, Any]
    verdict_rule: str
    passed_as_run: bool
    passed_every_composition: bool
    failing_compositions: list[str]
    inconclusive_compositions: list[str] = Field(default_factory=list)
    worst_composition: str | None
    slice: dict[str, Any] | None
    between_compositions: dict[str, Any]
    metric_range: dict[str, MetricRange]
    compositions: list[CompositionRow]
    extra_seconds: float | None = None


# -- per dataset, per variant ------------------------------------------------------------

class VariantDatasetEntry(Part):
    """``summary.datasets.<dataset>.variants.<variant>``."""

    role: Literal["reference", "candidate"]
    verdict: Verdict | None = None  # the per-variant verdict, where a writer adds it here
    metrics: dict[str, MetricEntry]
    reference_metrics: dict[str, MeanEntry] | None = None
    vectors: dict[str, Any] | None = None
    gate: GateResult | None = None
    batch_sensitivity: SensitivitySection | None = None
    encode: dict[str, Any] = Field(default_factory=dict)
    index: dict[str, Any] | None = None


class DatasetSummary(Part):
    queries: int
    documents: int | None = None
    variants: dict[str, VariantDatasetEntry]


class VariantSummary(Part):
    """``summary.variants.<variant>``: the variant over every dataset. ``passed`` is null
    for the reference (and, from the ungated fix on, for a candidate without a gate);
    ``verdict`` is written from that fix on."""

    role: Literal["reference", "candidate"]
    passed: bool | None = None
    verdict: Verdict | None = None
    weight_bytes: int | float | None = None
    settings_differ: dict[str, dict[str, Any]] | None = None
    startup_s: float | None = None
    total_s: float | None = None
    peak_rss_mb: float | None = None
    children_peak_rss_mb: float | None = None
    peak_rss_method: str | None = None
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


# -- rerank pipelines (pipeline.run_pipelines) -------------------------------------------

class Attribution(Part):
    total: PairedEntry
    retriever_only: PairedEntry
    reranker_only: PairedEntry
    interaction: PairedEntry


class Combination(Part):
    first_stage: str
    reranker: str
    depth: int
    kind: Literal["reference", "retriever", "reranker", "both"]
    first_stage_recall: MeanEntry
    metrics: dict[str, MetricEntry]
    reference_metrics: dict[str, MeanEntry] | None = None
    attribution: dict[str, Attribution] | None = None
    gate: GateResult | None = None
    verdict: Verdict | None = None


class Fidelity(Part):
    measures: dict[str, MeanEntry]
    drift: dict[str, Figure]
    first_stage: str


class PipelineDepth(Part):
    first_stage: dict[str, dict[str, MeanEntry]]
    combinations: dict[str, Combination]
    fidelity: dict[str, Fidelity]
    reference: str


class PipelineDataset(Part):
    queries: int
    depths: dict[str, PipelineDepth]


class FirstStageCost(Part):
    name: str
    seconds_per_query: float | None
    forward_passes_per_query: int | float | None


class DepthCost(Part):
    pairs_per_query: int
    forward_passes_per_query: int | float | None
    rerank_seconds_per_query: float | None
    rerank_cost_multiplier_vs_first_stage: float | None


class RerankerCost(Part):
    pairs_per_s: float | None
    pairs_scored: int | None = None
    pairs_cached: int | None = None
    forward_calls: int | None = None
    weight_bytes: int | float | None = None
    peak_rss_mb: float | None = None
    startup_s: float | None = None
    depths: dict[str, DepthCost]
    statement: str


class PipelineCost(Part):
    first_stage: FirstStageCost
    rerankers: dict[str, RerankerCost]


class RerankerInfo(Part):
    weight_bytes: int | float | None = None
    quantization: dict[str, Any] | None = None
    kind: str
    settings: dict[str, Any] | None = None


class PipelineSummary(Part):
    depths: list[int]
    cutoff: int
    first_stage: dict[str, Any]  # the recipe's first_stage block, as dumped
    reranker_reference: str
    datasets: dict[str, PipelineDataset]
    cost: dict[str, PipelineCost]
    rerankers: dict[str, RerankerInfo]
    passed: bool
    failed_gates: list[str]
    note: str | None = None


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

    def entry(self, dataset: str, variant: str) -> VariantDatasetEntry | None:
        ds = self.datasets.get(dataset)
        return None if ds is None else ds.variants.get(variant)


class ManifestDataset(Part):
    fingerprint: str | None = None
    queries: int | None = None
    documents: int | None = None
    source: dict[str, Any] = Field(default_factory=dict)


class ManifestVariant(Part):
    role: Literal["reference", "candidate"]
    backend: dict[str, Any] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)
    timings: dict[str, Any] = Field(default_factory=dict)
    parity: dict[str, Any] | None = None
    datasets: dict[str, dict[str, Any]] = Field(default_factory=dict)


class RunManifest(Part):
    """``manifest.json``: what ran. Written at the start (``status: running``), after the
    variants, and at the end or when the run stopped (``rundir.record_stop``)."""

    schema_version: int
    evalq_version: str | None = None
    git_revision: str | None = None
    versions: dict[str, str] = Field(default_factory=dict)
    environment: dict[str, Any] = Field(default_factory=dict)
    recipe_file: str | None = None
    recipe: dict[str, Any] = Field(default_factory=dict)  # typed by config.Recipe
    options: dict[str, Any] = Field(default_factory=dict)
    model: dict[str, Any] = Field(default_factory=dict)
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


def _field(error: dict[str, Any]) -> str:
    return ".".join(str(p) for p in error.get("loc", ()))


def parse(model: type[Part], data: dict[str, Any], file: Path) -> Any:
    """``data`` as ``model``; a wrong type, a null where a value belongs or an unknown
    key is bad input (exit 2) naming the file and the field."""
    try:
        return model.model_validate(migrate(data, file))
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


class LoadWorkload(Part):
    kind: str
    mode: str
    slo_p99_ms: float | None = None
    steps: list[dict[str, Any]] = Field(default_factory=list)
    knee: LoadKnee | None = None


class LoadVariant(Part):
    backend: str
    workloads: dict[str, LoadWorkload] = Field(default_factory=dict)
    startup_s: float | None = None
    server: dict[str, Any] | None = None
    url: str | None = None
    started_by_evalq: bool | None = None
    server_settings: dict[str, Any] | None = None
    parity: dict[str, Any] | None = None
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
