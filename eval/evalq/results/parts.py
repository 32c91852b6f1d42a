"""The parts of ``summary.json`` below a dataset's or a variant's entry: figures with
their intervals, gate checks, vector fidelity and encode counts, batch sensitivity and
the rerank pipelines; and the stored recipe as a report reads it.
:mod:`evalq.results.schema` composes them into the two files and re-exports them; see
its docstring for the rules (closed parts, NaN as null).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from evalq.core.encodestats import EncodeStats

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


class GateFigures(BaseModel):
    """What a report reads of a check's figures. The figures stay an open mapping (which
    ones a check stores depends on its kind: ``delta`` and ``margin`` for an allowed drop,
    ``mean`` and ``min`` for a historical floor, ``value``, ``min`` and ``stat`` for a
    statistic's floor); ``model_fields_set`` says which of these the check stored."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    delta: Figure = None
    margin: Figure = None
    mean: Figure = None
    value: Figure = None
    stat: Figure = None
    min: Figure = None
    ci_low: Figure = None
    ci_high: Figure = None
    queries_needed: Figure = None


class GateCheck(Part):
    gate: str
    passed: bool
    verdict: str
    reason: str
    figures: dict[str, Figure] = Field(default_factory=dict)

    @property
    def read_figures(self) -> GateFigures:
        """The figures as a report reads them (:class:`GateFigures`)."""
        return GateFigures.model_validate(self.figures)


class GateResult(Part):
    passed: bool
    checks: list[GateCheck] = Field(default_factory=list)


# -- vectors and encoding (execute.dataset_scoring) --------------------------------------

class CosineStats(Part):
    """Per-text cosines against the reference (``measure.reference.CosineSummary``);
    ``mean``/``p1``/``min`` are null when a cosine is undefined or there are no texts."""

    n: int
    mean: float | None
    p1: float | None
    min: float | None
    undefined: int
    candidate_nan: int
    candidate_inf: int
    reference_nonfinite: int
    ok: bool


class VectorFidelity(Part):
    """``vectors`` of a candidate: its queries' and documents' cosines to the reference."""

    query: CosineStats
    document: CosineStats


class LossSplit(Part):
    """One measure's loss for a candidate searched through an index (issue 30;
    ``evalq.execute.losses``): the model's (its exact search against the reference's),
    the index's (its run through the index against its own exact search) and both
    together (end to end). Positive is worse: a drop of the mean for a qrels measure,
    1 − mean agreement for a reference measure. ``None`` where it was not measured."""

    against: Literal["qrels", "reference"]
    model: float | None = None
    index: float | None = None
    end_to_end: float | None = None


class SweepPoint(Part):
    """One value of a swept search-time parameter (``evalq.execute.sweep``): what the
    index kept at it (recall@10 against the variant's own exact kNN, nDCG@10 against the
    qrels, overlap@10 against the reference's exact run), what it cost per query, and its
    gates. ``tested`` is false for a value the fixed-sequence test did not reach (a more
    accurate value before it did not pass); ``certified``: tested and every gate passed.
    ``exact``: the index fell back to an exhaustive search at this value."""

    value: float | int
    recall_at_10: float | None = None
    ndcg_at_10: float | None = None
    overlap_at_10: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    queries_per_s: float | None = None
    exact: bool = False
    verdict: Verdict
    tested: bool
    certified: bool
    checks: list[GateCheck] = Field(default_factory=list)


class SweepSummary(Part):
    """A candidate's sweep on one dataset: the parameter, its configured value (what the
    variant's own verdict and run are for), the points, and the cheapest certified one
    (lowest p50 latency, then lowest value, among the certified; None if none).
    ``procedure``: ``fixed_sequence``, each value tested at each gate's own α (``alpha``,
    by gate) from most to least accurate, stopping at the first that does not pass."""

    parameter: str
    configured: float | int | None = None
    procedure: Literal["fixed_sequence"] = "fixed_sequence"
    alpha: dict[str, float] = Field(default_factory=dict)
    points: list[SweepPoint]
    cheapest: float | int | None = None


class VectorProbe(Part):
    """A vector file checked against today's stack before the run used it (issue 31):
    ``texts`` sampled rows (``seed``) of its ``rows``, each compared with the reference
    engine's vector of the same text; ``side``: the documents or the queries."""

    file: str
    side: str = "documents"
    rows: int
    texts: int
    seed: int
    min_cosine: float
    lowest_cosine: float
    mean_cosine: float
    lowest_ids: list[str]
    norm_tolerance: float
    max_norm_difference: float | None
    passed: bool


class ReusedSides(Part):
    """Where each side a variant borrowed came from (``variant fp32``, ``file
    vectors.npy``); a side it encoded itself is absent."""

    documents: str | None = None
    queries: str | None = None


class EncodeSection(Part):
    """``encode`` of a variant on a dataset (empty when nothing was recorded). A side the
    variant borrowed (issue 31) has no counts: ``reused`` says where it came from
    (``variant fp32``, ``file vectors.npy``), and ``probe`` / ``query_probe`` how a
    documents' / queries' vector file was checked."""

    documents: EncodeStats | None = None
    queries: EncodeStats | None = None
    reused: ReusedSides | None = None
    probe: VectorProbe | None = None
    query_probe: VectorProbe | None = None


# -- batch sensitivity (sensitivity.apply_sensitivity) ------------------------------------

class Dependence(Part):
    """What the backend declares about batch dependence (``engines.spec``)."""

    level: str
    reason: str
    tolerance: float | None
    batch_dependent: bool


class SensitivitySlice(Part):
    max_queries: int | None
    max_docs: int | None
    queries: int
    documents: int


class CosineRange(Part):
    mean: float | None
    p1: float | None
    min: float | None


class BetweenCompositions(Part):
    """The lowest cosine between compositions' vectors of each text, summarized; null
    figures when fewer than two compositions ran."""

    texts: int
    compositions: int
    cosine: CosineRange | None
    max_abs_diff: float | None
    bit_identical: bool | None

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
    vectors: VectorFidelity | None = None
    seconds: float | None = None


class MetricRange(Part):
    min: float | None
    max: float | None
    range: float | None
    of: str


class SensitivitySection(Part):
    dependence: Dependence
    verdict_rule: str
    passed_as_run: bool
    passed_every_composition: bool
    failing_compositions: list[str]
    inconclusive_compositions: list[str] = Field(default_factory=list)
    worst_composition: str | None
    slice: SensitivitySlice | None
    between_compositions: BetweenCompositions
    metric_range: dict[str, MetricRange]
    compositions: list[CompositionRow]
    extra_seconds: float | None = None


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


class ScoreDrift(Part):
    """A reranker's scores against the reference reranker's over every pair at once
    (``measure.fidelity.pooled_drift``; only ``pairs`` when there were none)."""

    pairs: int
    mean_delta: float | None = None
    mean_abs_delta: float | None = None
    p99_abs_delta: float | None = None
    max_abs_delta: float | None = None
    ks_statistic: float | None = None
    reference_mean: float | None = None
    candidate_mean: float | None = None
    reference_std: float | None = None
    candidate_std: float | None = None
    tie_rate_reference: float | None = None
    tie_rate_candidate: float | None = None


class Fidelity(Part):
    measures: dict[str, MeanEntry]
    drift: ScoreDrift
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


# -- texts/<dataset>.json (results.snippets) ------------------------------------------

class TextsPart(Part):
    """``texts/<dataset>.json``: the query texts and the first ``words`` words of the
    documents the reports show (each variant's top ``top`` and every judged one), and the
    judgments, so a report of the folder needs no dataset."""

    top: int | None = None
    words: int | None = None
    queries: dict[str, str] = Field(default_factory=dict)
    documents: dict[str, str] = Field(default_factory=dict)
    judgments: dict[str, dict[str, int]] = Field(default_factory=dict)


# -- the recipe as a report reads it (manifest.recipe) ---------------------------------

class RecipeRecordVectors(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    quantize: str = "none"
    rescore: int | None = None


class RecipeRecordVariant(BaseModel):
    """A variant of the recipe as stored: its name, and what a report shows of it."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str
    backend: str | None = None
    dtype: str | None = None
    vectors: RecipeRecordVectors | None = None


class RecipeRecordGate(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    metric: str
    against: str = "qrels"


class RecipeRecordStats(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    confidence: float = 0.95
    resamples: int = 10_000
    seed: int = 0


class RecipeRecordReport(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    cost: str | None = None


class RecipeRecord(BaseModel):
    """What a report reads of the recipe stored in the manifest (``config.Recipe``
    dumped). Open (``extra="ignore"``): the recipe is validated as a recipe where it is
    run; a report reads only these parts, and a recipe of an older evalq still reads."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    name: str | None = None
    description: str | None = None
    reference: RecipeRecordVariant | None = None
    candidates: list[RecipeRecordVariant] = Field(default_factory=list)
    metrics: list[str] = Field(default_factory=list)
    reference_metrics: list[str] = Field(default_factory=list)
    gates: list[RecipeRecordGate] = Field(default_factory=list)
    stats: RecipeRecordStats = Field(default_factory=RecipeRecordStats)
    report: RecipeRecordReport = Field(default_factory=RecipeRecordReport)

    def variant(self, name: str) -> RecipeRecordVariant | None:
        """The reference or candidate called ``name``."""
        every = [self.reference] if self.reference is not None else []
        return next((v for v in [*every, *self.candidates] if v.name == name), None)
