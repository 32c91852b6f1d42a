"""The manifest's variant and dataset entries, and what a report reads of their open
records: a backend's description, a dataset's source, what a variant recorded on a
dataset (its encode counts, its index).

Those records stay open mappings in the file: their keys depend on the backend or the
index kind that wrote them, and a new backend or kind may add keys without a schema
change. What the reports read of them is typed here, as models that ignore the other
keys (like ``RecipeRecord``), and checked when the manifest is parsed: a hand-edited value
of the wrong type is a damaged file (exit 2 naming it), not an error met later by a
report. :mod:`evalq.results.schema` re-exports them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from evalq.results.parts import Part


class OpenRecord(BaseModel):
    """What a report reads of an open record: the other keys are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)


def reads_as(model: type[OpenRecord], *, each: bool = False) -> AfterValidator:
    """A check for an open mapping of a results file, run when the file is parsed: it
    must read as ``model`` (with ``each``, every value of it must), so a report that reads
    it later cannot fail."""
    def check(value: Any) -> Any:
        for record in value.values() if each else [value]:
            model.model_validate(record or {})
        return value
    return AfterValidator(check)


class BackendQuantization(OpenRecord):
    """A backend description's ``quantization`` when it is a quantization record
    (``core.values.QuantizationRecord``); vLLM writes the engine's method name instead."""

    method: str | None = None
    bits: int | None = None
    weight_bytes: int | None = None
    params: dict[str, Any] | None = None


class BackendRecord(OpenRecord):
    """The keys every backend description may carry (``Encoder.describe()`` plus the
    run's fingerprints); a backend's own keys (url, server info, ...) are not read."""

    backend: str | None = None
    dtype: str | None = None
    fingerprint: str | None = None
    model_fingerprint: str | None = None
    settings: dict[str, Any] | None = None
    quantization: BackendQuantization | str | None = None

    @property
    def quantization_record(self) -> BackendQuantization | None:
        """The quantization record, or None (none written, or a vLLM method name)."""
        quant = self.quantization
        return quant if isinstance(quant, BackendQuantization) else None


class IndexRecord(OpenRecord):
    """An ``index`` record (summary entry or manifest): its size, and for an exact or
    vector-quantized index the width and the stored form. An index kind's own figures
    are not read."""

    bytes: float | None = None
    dim: int | None = None
    quantize: str | None = None


class EncodeFigures(OpenRecord):
    """What a report reads of one side's encode counts in the manifest (the summary
    stores them whole, as ``EncodeStats``): enough for the documents per second."""

    texts: int | None = None
    n_computed: int | None = None
    seconds_computing: float | None = None
    texts_per_s: float | None = None


class EncodeRecord(OpenRecord):
    """The manifest's ``encode`` of a variant on a dataset, as a report reads it."""

    documents: EncodeFigures | None = None


class DatasetRecord(OpenRecord):
    """What the manifest recorded of a variant on one dataset."""

    encode: EncodeRecord | None = None
    index: IndexRecord | None = None


class TimingsRecord(OpenRecord):
    """A variant's ``timings`` as a report reads them: the peak resident memory."""

    peak_rss_mb: float | None = None


class SourceRecord(OpenRecord):
    """Where a dataset came from: a named source, or a path."""

    source: str | None = None
    path: str | None = None


class ModelRecord(OpenRecord):
    """The manifest's ``model``: the reference's weights."""

    path: str | None = None
    fingerprint: str | None = None


class EnvironmentRecord(OpenRecord):
    """The manifest's ``environment``: the interpreter and machine that ran."""

    platform: str | None = None
    cpu_count: int | None = None


class ManifestDataset(Part):
    fingerprint: str | None = None
    queries: int | None = None
    documents: int | None = None
    source: Annotated[dict[str, Any], reads_as(SourceRecord)] = Field(default_factory=dict)

    @property
    def source_record(self) -> SourceRecord:
        return SourceRecord.model_validate(self.source)


class ManifestVariant(Part):
    role: Literal["reference", "candidate"]
    backend: Annotated[dict[str, Any], reads_as(BackendRecord)] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)
    timings: Annotated[dict[str, Any], reads_as(TimingsRecord)] = Field(default_factory=dict)
    parity: dict[str, Any] | None = None
    datasets: Annotated[dict[str, dict[str, Any]], reads_as(DatasetRecord, each=True)] = Field(
        default_factory=dict)

    @property
    def timings_record(self) -> TimingsRecord:
        return TimingsRecord.model_validate(self.timings)

    @property
    def described(self) -> BackendRecord:
        """The backend description as a report reads it."""
        return BackendRecord.model_validate(self.backend)

    def recorded(self, dataset: str) -> DatasetRecord:
        """What the variant recorded on ``dataset`` (empty when nothing)."""
        return DatasetRecord.model_validate(self.datasets.get(dataset) or {})


__all__ = ["BackendQuantization", "BackendRecord", "DatasetRecord", "EncodeFigures",
           "EncodeRecord", "EnvironmentRecord",
           "IndexRecord", "ManifestDataset", "ManifestVariant", "ModelRecord", "OpenRecord",
           "SourceRecord", "TimingsRecord", "reads_as"]
