"""The plan's types: everything a run will do, resolved.

:func:`evalq.recipe.plan.build_plan` makes a :class:`Plan` from a recipe, once, before
any model loads; the app hands it to the executors (``evalq.execute``), which read the
datasets, limits, batching, cache folders, encoding executor, parity texts, the load
test's sections, each variant's resolved model, settings, engine options and index kind,
and the recipe's deciding sections (:class:`evalq.plan.run.RunSections`) from it.
This module declares them: frozen dataclasses over the options the lower parts declare
(:class:`evalq.engines.options.EncoderVariant`, :class:`evalq.encode.options.ExecutorSpec`),
no implementation, so an executor imports it and not the recipe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalq.core.values import EncodingSettings
from evalq.encode.options import ExecutorSpec
from evalq.engines.options import EncoderVariant, LaunchCommand
from evalq.plan.load import CapacitySection, LoadSection
from evalq.plan.run import RunSections
from evalq.plan.search import SearchPlan
from evalq.plan.sides import SidePlan
from evalq.plan.variant import SearchedVariant


@dataclass(frozen=True)
class Limits:
    """How much of each dataset the run reads and how deep it searches: ``max_queries``
    and ``max_docs`` (None: all; the command line's over the recipe's), ``depth`` (the
    deepest cutoff of a metric, gate or pipeline), the statistics' ``resamples`` and
    ``confidence``, and ``cache_chunk`` texts per embedding-cache chunk."""

    max_queries: int | None
    max_docs: int | None
    depth: int
    resamples: int
    confidence: float
    cache_chunk: int

    def as_dict(self) -> dict[str, Any]:
        return {"max_queries": self.max_queries, "max_docs": self.max_docs,
                "depth": self.depth, "resamples": self.resamples,
                "confidence": self.confidence, "cache_chunk": self.cache_chunk}


@dataclass(frozen=True)
class ParityPlan:
    """The parity preflight: on or off, how many texts, the cosine a checked variant
    must reach."""

    enabled: bool
    texts: int
    min_cosine: float


@dataclass(frozen=True)
class GatePlan:
    text: str  # e.g. "nDCG@10 vs qrels max_drop 1%"
    measure: str
    against: str
    variants: tuple[str, ...]
    pooled: bool = False


@dataclass(frozen=True)
class VariantPlan:
    """One selected variant, resolved: its model folder and weights fingerprint, encoding
    settings, device, quantization, what keys its cache chunks, the gates that judge it,
    its engine options (``options``: what its backend builds), where it sits in the recipe
    (``where``: ``reference``, ``candidates.0``) and the server ``load.launch`` starts for
    it (``launch``), if any."""

    name: str
    role: str  # "reference" | "candidate"
    backend: str
    dtype: str
    device: str  # resolved: "cpu" | "cuda" | "remote"
    device_name: str
    model_path: str | None
    model_fingerprint: str | None
    settings: dict[str, Any] | None
    quantization: dict[str, Any] | None  # method + params, or None
    vectors: str
    endpoint: str | None
    cached: str  # what keys this variant's cache chunks
    gates: tuple[str, ...]
    options: SearchedVariant  # the recipe's variant: engine options and index kind
    where: str
    # Whose quantization decides whether this variant must match the reference exactly:
    # itself, or the onnx variant whose graph its launched server serves (onnx_from).
    parity_subject: EncoderVariant
    launch: LaunchCommand | None = None
    # Pooling, padding side, EOS and instructions in words (engines.lasttoken)
    tokens: str | None = None
    # The arithmetic it will run at on this machine (recipe.arithmetic)
    arithmetic: str | None = None
    # Which sides it encodes and which it borrows, from where (issue 31: plan.sides)
    sides: SidePlan = field(default_factory=SidePlan)

    def rate_identity(self) -> dict[str, Any]:
        """What decides how fast this variant encodes (the key of its measured rate in
        :class:`evalq.encode.rates.RateLedger`): its engine as resolved, not its name or
        its gates, so a renamed variant keeps its rate and another dtype does not."""
        return {"backend": self.backend, "dtype": self.dtype, "device": self.device,
                "device_name": self.device_name, "model": self.model_fingerprint,
                "quantization": self.quantization, "settings": self.settings,
                "arithmetic": self.arithmetic, "endpoint": self.endpoint}

    def encoding_settings(self) -> EncodingSettings:
        """The settings the plan resolved (model defaults + recipe overrides): what every
        executor encodes with, so none resolves them again."""
        if self.settings is None:
            raise ValueError(f"variant '{self.name}' has no resolved settings (plan failed)")
        return EncodingSettings(**self.settings)

    def model_folder(self) -> Path:
        if self.model_path is None:
            raise ValueError(f"variant '{self.name}' has no resolved model (plan failed)")
        return Path(self.model_path)


@dataclass(frozen=True)
class Plan:
    """A recipe resolved for one run: the executors' only input for datasets, limits,
    batching, cache folders, the encoding executor, parity, the variants, the load test,
    and (``sections``) the measure lists, gates, statistics, report options, pipelines and
    batch sensitivity as written."""

    recipe: str
    recipe_file: Path
    datasets: tuple[str, ...]
    # The recipe's dataset entries as the loader takes them (names or inline specs).
    dataset_specs: tuple[str | dict[str, Any], ...]
    variants: tuple[VariantPlan, ...]  # the selected ones, reference first
    variant_names: tuple[str, ...]  # every variant of the recipe (--only may select fewer)
    metrics: tuple[str, ...]
    reference_metrics: tuple[str, ...]
    gates: tuple[GatePlan, ...]
    output: Path
    cache_dir: Path | None  # the recipe's cache folder; None with --no-cache
    limits: Limits
    # Where derived artifacts (quantized checkpoints, exported graphs) and logs of builds
    # go: the recipe's cache folder, used even with --no-cache (which skips embeddings).
    work_dir: Path
    title_separator: str | None
    batch_tokens: int | None  # the recipe's in-process batch budget (variants may override)
    executor: ExecutorSpec
    parity: ParityPlan
    # The recipe's deciding sections as written: measure lists, gates, statistics,
    # report options, pipelines, batch sensitivity (evalq.plan.run).
    sections: RunSections
    # The recipe as JSON: what the manifest stores, and `evalq gate` / `calibrate` /
    # `certify` re-read from a results folder.
    recorded: Mapping[str, Any]
    only: tuple[str, ...] | None = None  # --only, as given
    load: LoadSection | None = None  # the recipe's load test (``evalq load``)
    capacity: CapacitySection | None = None  # its demand and prices
    # Problems of this machine, not of the recipe (device, capability), when the plan was
    # built with ``machine=False`` (``evalq validate`` of a GPU recipe on a laptop).
    machine_notes: tuple[str, ...] = ()
    # Gates on rerank pipelines ("pipeline <name>: <gate>"); they decide the exit code too.
    pipeline_gates: tuple[str, ...] = ()
    # Batch sensitivity decides the variants' own gates under every batch composition.
    sensitivity: bool = False
    # What the recipe's load test may schedule and allocate (``evalq load``), if it has one.
    load_budget: str | None = None
    # What each rerank pipeline will score (queries × depth × rankings × rerankers).
    pipeline_budgets: tuple[str, ...] = ()
    # The recipe's grid search (``search:``), resolved: combinations, encodings, alpha.
    search: SearchPlan | None = None

    def variant(self, name: str) -> VariantPlan:
        return next(v for v in self.variants if v.name == name)

    @property
    def depth(self) -> int:
        """The depth the run searches to (pipelines included)."""
        return self.limits.depth

    @property
    def reference(self) -> VariantPlan:
        return self.variants[0]
