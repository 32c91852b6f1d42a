"""A results folder, read-only, as every report sees it.

Reports (HTML, history, compare, markdown) take their figures from here and from nowhere
else: the results contract (``manifest.json``, ``summary.json``, ``per_query/``,
``per_text/``, ``runs/``, ``texts/``) is their only input, so the report of an old run
keeps working after the code, the dataset or the model moved on. Nothing here computes a
statistic; a part that is missing reads as ``None`` and leaves a note saying what is
missing and what that costs the reader.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.errors import InputError
from evalq.core.values import PerQuery
from evalq.results.folder import RunFolder
from evalq.results.hostpart import HostPart
from evalq.results.schema import (
    BackendRecord,
    DatasetRecord,
    GateCheck,
    ManifestDataset,
    ManifestVariant,
    RecipeRecord,
    RunManifest,
    RunSummary,
    TextsPart,
    VariantDatasetEntry,
    VariantSummary,
)

_HOST_ENGINES = ("torch", "onnxruntime", "openvino", "faiss-cpu")


def host_text(host: HostPart | None, *, engines: bool = True) -> str:
    """One line for a header: CPU, numerics class, cores, caps and (``engines``) engine
    versions (``host unknown`` for a folder written before host facts)."""
    if host is None:
        return "host unknown (written before evalq recorded host facts)"
    caps = ", ".join(f"{k}={v}" for k, v in host.isa_caps.items())
    versions = ", ".join(f"{n} {v}" for n, v in host.engines.items()
                         if engines and n in _HOST_ENGINES and v)
    return (f"{host.cpu_model or 'unknown CPU'} · numerics class "
            f"{host.numerics_class}" + (f" (capped: {caps})" if caps else "")
            + f" · {host.cores or '?'} cores" + (f" · {versions}" if versions else ""))


def class_warning(classes: dict[str, str | None]) -> str | None:
    """A warning when the folders (``{label: numerics class}``) were measured on
    different numerics classes: int8 and bf16 kernels differ by instruction set, so a
    difference between them may be the CPU's, not the change's. None when they agree
    (folders written before host facts count as unknown, and are named)."""
    if len(set(classes.values())) <= 1:
        return None
    named = ", ".join(f"{label} on {cls or 'an unrecorded class'}"
                      for label, cls in classes.items())
    return (f"warning: measured on different numerics classes ({named}); integer and "
            "reduced-precision kernels differ by instruction set, so differences may "
            "come from the CPU, and a verdict holds for the class it was decided on")


@dataclass
class RunView:
    """One results folder, typed: ``manifest`` as :class:`RunManifest`, ``summary`` as
    :class:`RunSummary` (``None`` for a run that never finished). Sections read their
    attributes; the manifest's open records read through :mod:`evalq.results.records`
    (:meth:`backend`, :meth:`recorded`), and ``texts/`` as :class:`TextsPart`."""

    root: Path
    manifest: RunManifest
    summary: RunSummary | None
    notes: list[str] = field(default_factory=list)
    _cache: dict[tuple[str, str, str], Any] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, root: str | Path) -> RunView:
        """Read a folder through the results models: a damaged ``manifest.json`` or
        ``summary.json`` (a wrong type, a null, a foreign key) is bad input naming the
        file and the field."""
        root = Path(root)
        if not root.is_dir():
            raise InputError(message="no such results folder", file=root,
                             fix="pass a folder written by 'evalq run' (e.g. results/quickstart)")
        folder = RunFolder(root)
        view = cls(root=root, manifest=folder.read_manifest(), summary=None)
        if (root / "summary.json").is_file():
            view.summary = folder.read_summary()
        else:
            error = view.manifest.error
            view.notes.append(
                f"no summary.json: the run did not finish (status "
                f"{view.manifest.status or 'unknown'}" + (f": {error}" if error else "")
                + "); aggregates, confidence intervals and verdicts are missing, stored "
                "per-query values are shown where they exist")
        return view

    @classmethod
    def of(cls, root: Path, manifest: Mapping[str, Any],
           summary: Mapping[str, Any] | None) -> RunView:
        """A view of a manifest and summary held in memory (``evalq gate`` renders the
        summary it just decided, not the stored one)."""
        return cls(root=Path(root), manifest=RunManifest.model_validate(manifest),
                   summary=None if summary is None else RunSummary.model_validate(summary))

    # -- identity ------------------------------------------------------------------------
    @cached_property
    def recipe(self) -> RecipeRecord:
        return self.manifest.recipe_record

    @property
    def name(self) -> str:
        if self.summary is not None:
            return self.summary.recipe
        return self.recipe.name or self.root.name

    @property
    def reference(self) -> str:
        if self.summary is not None:
            return self.summary.reference
        return self.recipe.reference.name if self.recipe.reference is not None else ""

    @property
    def started(self) -> str:
        return self.manifest.started or ""

    @property
    def git_revision(self) -> str:
        return self.manifest.git_revision or "unknown"

    @property
    def host(self) -> HostPart | None:
        """The host the numbers were measured on: the summary's (with the engines'
        choices), else the manifest's; None for folders written before host facts."""
        for model in (self.summary, self.manifest):
            if model is not None and model.host is not None:
                return model.host
        return None

    @property
    def numerics_class(self) -> str | None:
        return None if self.host is None else self.host.numerics_class

    @property
    def label(self) -> str:
        """Short label for a run in history plots: time and abbreviated revision."""
        rev = self.git_revision
        short = rev[:8] + ("-dirty" if rev.endswith("-dirty") else "") if rev != "unknown" \
            else "no-git"
        return f"{self.started[:16].replace('T', ' ')} {short}"

    @property
    def cost_key(self) -> str:
        return self.recipe.report.cost or "weight_bytes"

    @property
    def confidence(self) -> float:
        """The recipe's confidence level (what the tables' intervals are at)."""
        return self.recipe.stats.confidence

    # -- structure -----------------------------------------------------------------------
    @cached_property
    def datasets(self) -> list[str]:
        if self.summary is not None:
            return list(self.summary.datasets)
        return list(self.manifest.datasets)

    @cached_property
    def variants(self) -> list[str]:
        """Reference first, then candidates in recipe order; a candidate the recipe names
        but the folder lacks is listed too (see :meth:`ran`)."""
        names: list[str] = []
        recipe_names = [self.recipe.reference.name if self.recipe.reference else None] + [
            c.name for c in self.recipe.candidates]
        for source in (recipe_names, list(self.manifest.variants),
                       list(self.summary.variants if self.summary is not None else [])):
            names += [n for n in source if n and n not in names]
        return names

    @property
    def candidates(self) -> list[str]:
        return [v for v in self.variants if v != self.reference]

    def ran(self, variant: str) -> bool:
        return variant in self.manifest.variants

    def manifest_variant(self, variant: str) -> ManifestVariant | None:
        return self.manifest.variants.get(variant)

    def backend(self, variant: str) -> BackendRecord:
        """The manifest's backend description of a variant, as a report reads it; empty
        when absent."""
        info = self.manifest.variants.get(variant)
        return BackendRecord() if info is None else info.described

    def recorded(self, dataset: str, variant: str) -> DatasetRecord:
        """What the manifest recorded of a variant on a dataset (empty if none)."""
        info = self.manifest.variants.get(variant)
        return DatasetRecord() if info is None else info.recorded(dataset)

    def summary_variant(self, variant: str) -> VariantSummary | None:
        return None if self.summary is None else self.summary.variants.get(variant)

    def entry(self, dataset: str, variant: str) -> VariantDatasetEntry | None:
        """The summary's per-dataset entry of a variant (metrics, gate, encode, index)."""
        return None if self.summary is None else self.summary.entry(dataset, variant)

    def gate_checks(self, dataset: str, variant: str) -> list[GateCheck]:
        """The stored gate checks of a variant on a dataset (empty when none)."""
        entry = self.entry(dataset, variant)
        return [] if entry is None or entry.gate is None else list(entry.gate.checks)

    def dataset_record(self, dataset: str) -> ManifestDataset:
        """What the manifest records of a dataset (fingerprint, queries, documents)."""
        return self.manifest.datasets.get(dataset) or ManifestDataset()

    def gated_metrics(self) -> list[str]:
        """Metrics named by gates, qrels ones first, in recipe order."""
        gates = self.recipe.gates
        ordered = [g.metric for g in gates if g.against == "qrels"]
        ordered += [g.metric for g in gates if g.against == "reference"]
        return list(dict.fromkeys(ordered))

    def headline_metric(self) -> str | None:
        """The first gated qrels metric, else the first metric: what compact views show."""
        qrels_gated = [g.metric for g in self.recipe.gates if g.against == "qrels"]
        metrics = self.recipe.metrics
        for m in qrels_gated:
            if m in metrics:
                return m
        return metrics[0] if metrics else None

    # -- stored per-query and per-text values -------------------------------------------
    def _file(self, kind: str, dataset: str, variant: str, suffix: str) -> Path:
        return self.root / kind / dataset / f"{variant}{suffix}"

    def per_query(self, dataset: str, variant: str) -> PerQuery | None:
        key = ("per_query", dataset, variant)
        if key not in self._cache:
            path = self._file("per_query", dataset, variant, ".jsonl")
            self._cache[key] = RunFolder(self.root).read_per_query(dataset, variant) \
                if path.is_file() else None
        cached: PerQuery | None = self._cache[key]
        return cached

    def per_query_column(self, dataset: str, variant: str, metric: str) -> np.ndarray | None:
        values = self.per_query(dataset, variant)
        if values is None or metric not in values.values:
            return None
        return np.asarray(values.values[metric], dtype=np.float64)

    def per_text(self, dataset: str, variant: str) -> dict[str, dict[str, float | None]] | None:
        key = ("per_text", dataset, variant)
        if key not in self._cache:
            path = self._file("per_text", dataset, variant, ".json")
            self._cache[key] = json.loads(path.read_text(encoding="utf-8")) \
                if path.is_file() else None
        cached: dict[str, dict[str, float | None]] | None = self._cache[key]
        return cached

    def top(self, dataset: str, variant: str, k: int = 10) -> dict[str, list[tuple[str, float]]] \
            | None:
        """``{query_id: [(doc_id, score), ...]}``: the first ``k`` ranks of the stored
        TREC run (evalq writes its runs in rank order)."""
        key = ("runs", dataset, f"{variant}@{k}")
        if key not in self._cache:
            path = self._file("runs", dataset, variant, ".trec")
            out: dict[str, list[tuple[str, float]]] | None = None
            if path.is_file():
                out = {}
                with path.open(encoding="utf-8") as handle:
                    for line in handle:
                        parts = line.split()
                        if len(parts) >= 6 and int(parts[3]) <= k:
                            out.setdefault(parts[0], []).append((parts[2], float(parts[4])))
            self._cache[key] = out
        cached: dict[str, list[tuple[str, float]]] | None = self._cache[key]
        return cached

    def texts(self, dataset: str) -> TextsPart | None:
        key = ("texts", dataset, "")
        if key not in self._cache:
            self._cache[key] = RunFolder(self.root).read_texts(dataset)
        cached: TextsPart | None = self._cache[key]
        return cached


def finite(value: Any) -> float | None:
    """A stored number as a float, or None for null / NaN / missing."""
    if value is None or isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None
