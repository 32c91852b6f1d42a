"""A recipe, validated and typed.

Recipes are YAML (with ``include:``); every key is checked here, once, before anything
loads: unknown keys, wrong types, unknown quantization methods and unknown measures stop
the run with exit 2 and a message naming the file, the line, the key and the allowed
values. Nothing downstream re-validates.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from evalq.core.errors import InputError, RecipeValueError
from evalq.core.locations import resolve_recipe
from evalq.core.names import PathName
from evalq.core.options import StrictOptions
from evalq.encode.options import ExecutorSpec
from evalq.engines.options import ONNX_BACKEND, SettingsOverrides
from evalq.engines.quantize import validate_quantization
from evalq.engines.registry import BACKENDS, allowed_backend, backend_enum, options_misplaced
from evalq.measure.registry import parse_measure
from evalq.plan.gates import GateConfig, StatsOptions, gate_spec
from evalq.plan.load import CapacitySection, LoadSection, check_launch_sources
from evalq.plan.pipelines import PipelineSpec
from evalq.plan.run import ReportOptions, RunSections
from evalq.plan.search import SearchSection
from evalq.plan.sensitivity import BatchSensitivity
from evalq.plan.variant import SearchedVariant
from evalq.recipe.graph_files import resolve_graph_files
from evalq.recipe.pipeline_checks import check_pipelines
from evalq.recipe.yamlsource import KeyPath, Located, load_yaml
from evalq.retrieve.kinds import KindOptions
from evalq.retrieve.registry import DEFAULT_VECTOR_KIND, INDEX_KINDS


class ModelSpec(StrictOptions):
    """The model every variant serves: a folder, ``pkg:<module>`` or a locally cached HF id."""

    path: str
    kind: Literal["embedding"] = "embedding"

    @field_validator("kind", mode="before")
    @classmethod
    def _reranker_is_a_pipeline(cls, value: Any) -> Any:
        # A reranker is judged inside a first stage -> reranker pipeline, not as `model:`.
        if isinstance(value, str) and value.lower() in ("reranker", "cross-encoder"):
            raise RecipeValueError(
                message=f"model.kind '{value}': a reranker is evaluated as the second stage "
                "of a pipeline (it needs candidates to rerank), not as the recipe's model",
                field="model.kind",
                fix="keep model.kind: embedding (the first stage's model) and add "
                "pipelines: [{name: ..., first_stage: {kind: bm25}, depths: [20], "
                "reranker: {model: <your reranker>, kind: cross-encoder}}]; see "
                "docs/rerank-pipelines.md and recipes/rerank-pipeline.yaml")
        return value


class EncodingOverrides(SettingsOverrides):
    """Encoding settings; unset fields come from the model's sentence-transformers config
    (the fields and their checks are ``evalq.engines.options.SettingsOverrides``)."""

    def merged(self, over: EncodingOverrides) -> EncodingOverrides:
        return EncodingOverrides(**{**self.model_dump(exclude_none=True),
                                    **over.model_dump(exclude_none=True)})


class Variant(SearchedVariant):
    """A recipe variant: what its engine builds (:class:`evalq.engines.options.EncoderVariant`,
    declared by the engines), the index its search builds (:class:`evalq.plan.variant.
    SearchedVariant`), and the checks that need the backend registry."""

    # a registered embedding backend (engines/registry.py); the schema lists them
    backend: str = Field(default="inprocess", json_schema_extra=backend_enum("embedding"))
    encoding: EncodingOverrides = EncodingOverrides()

    @field_validator("backend", mode="before")
    @classmethod
    def _registered_backend(cls, value: Any) -> str:
        return allowed_backend("embedding", value)

    @field_validator("quantization")
    @classmethod
    def _check_quantization(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        # Method and parameters are checked against the quantize registry after parsing
        # (``_check_quantization_methods``), where the error can name the recipe line.
        if value is not None and not isinstance(value.get("method"), str):
            raise ValueError("quantization needs 'method' (e.g. method: bitsandbytes)")
        return value

    @model_validator(mode="after")
    def _backend_options(self) -> Variant:
        wrong = options_misplaced("embedding", self.backend,
                                  {key: getattr(self, key, None)
                                   for key in BACKENDS.option_keys("embedding")})
        if wrong:
            raise ValueError(wrong)
        if self.vectors.rescore is not None and self.vectors.quantize == "none":
            raise ValueError("vectors.rescore needs vectors.quantize int8 or binary")
        if self.vectors.queries == "float" and self.vectors.quantize == "none":
            raise ValueError("vectors.queries: float scores float queries against quantized "
                             "documents; it needs vectors.quantize int8 or binary")
        if self.vectors.queries == "float" and self.vectors.rescore is not None:
            raise ValueError("vectors.queries: float already scores every document with the "
                             "float query (no quantized first stage to rescore); remove "
                             "vectors.rescore")
        if self.searches_index and self.vectors.quantize != "none":
            raise ValueError("'index' and 'vectors.quantize' both compress the stored vectors; "
                             "use one (a FAISS factory such as 'Flat' + SQ8 / PQ covers both)")
        return self


class ParityOptions(StrictOptions):
    enabled: bool = True
    texts: int = Field(default=32, ge=1)
    # a cosine: NaN passed validate and then failed every check 'required >= nan'
    min_cosine: float = Field(default=0.9999, ge=-1, le=1, allow_inf_nan=False)


class Recipe(StrictOptions):
    name: PathName
    description: str = ""
    model: ModelSpec
    datasets: list[str | dict[str, Any]] = Field(min_length=1)
    encoding: EncodingOverrides = EncodingOverrides()
    title_separator: str | None = " "
    # Padded tokens per in-process batch; unset = by device (backends.factory.batching).
    batch_tokens: int | None = Field(default=None, ge=16)
    reference: Variant
    candidates: list[Variant] = Field(default_factory=list)
    metrics: list[str] = Field(default_factory=lambda: ["nDCG@10", "R@100", "RR@10"])
    reference_metrics: list[str] = Field(
        default_factory=lambda: ["overlap@10", "refnDCG@10", "RBO@100", "cosine"]
    )
    gates: list[GateConfig] = Field(default_factory=list)
    stats: StatsOptions = StatsOptions()
    parity: ParityOptions = ParityOptions()
    report: ReportOptions = ReportOptions()
    max_queries: int | None = Field(default=None, ge=1)
    max_docs: int | None = Field(default=None, ge=1)
    output: str | None = None  # default results/<name>
    cache_dir: str = ".evalq-cache"
    # Texts per embedding-cache chunk: the unit of resumption after an interruption.
    cache_chunk: int = Field(default=512, ge=1)
    load: LoadSection | None = None  # `evalq load`: workloads, SLOs, servers to launch
    capacity: CapacitySection | None = None  # `evalq load`: demand and price per replica
    executor: ExecutorSpec = ExecutorSpec()  # where encoding runs: local or ray
    # Two-stage pipelines (first stage -> reranker), see pipeline_config.py.
    pipelines: list[PipelineSpec] = Field(default_factory=list)
    # Re-encode batch-dependent candidates under several batch compositions (#14).
    batch_sensitivity: BatchSensitivity | None = None
    # A grid of weights × vectors × dims × index, certified with error control (#31).
    search: SearchSection | None = None

    @model_validator(mode="after")
    def _names(self) -> Recipe:
        names = [self.reference.name] + [c.name for c in self.candidates]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"variant names must be unique; repeated: {', '.join(dupes)}")
        for gate in self.gates:
            for v in gate.variants or []:
                if v not in names[1:]:
                    raise ValueError(f"gate names unknown candidate '{v}'; candidates: "
                                     f"{', '.join(names[1:]) or '(none)'}")
        if self.reference.searches_index:
            raise ValueError("the reference searches exactly (it is what candidates are "
                             "judged against); put 'index' on a candidate, e.g. one with the "
                             "reference's settings to measure the index loss alone")
        check_launch_sources(self.load, {v.name: v.backend for v in self.variants},
                             ONNX_BACKEND)
        return self

    @property
    def variants(self) -> list[Variant]:
        return [self.reference, *self.candidates]

    def sections(self) -> RunSections:
        """The deciding sections `evalq run`'s executors read (:mod:`evalq.plan.run`):
        the plan carries them, and regate and calibrate build them from a stored recipe."""
        return RunSections(
            recipe=self.name, reference=self.reference.name, metrics=tuple(self.metrics),
            reference_metrics=tuple(self.reference_metrics), gates=tuple(self.gates),
            stats=self.stats, report=self.report, title_separator=self.title_separator,
            pipelines=tuple(self.pipelines), batch_sensitivity=self.batch_sensitivity)


def _loc_to_path(loc: tuple[Any, ...]) -> KeyPath:
    # pydantic inserts union-branch and validator names into loc; keep real keys only
    return tuple(p for p in loc if isinstance(p, int) or (isinstance(p, str) and not p.startswith(
        ("function-", "union[", "list[", "dict[", "str", "literal["))))


def _describe(err: Mapping[str, Any], model: type[BaseModel], path: KeyPath,
              data: Any = None) -> tuple[str, str]:
    kind = err["type"]
    if kind == "extra_forbidden":
        key = str(path[-1]) if path else "?"
        allowed = _allowed_keys(model, path[:-1], data)
        guess = difflib.get_close_matches(key, allowed, n=1)
        hint = f" Did you mean '{guess[0]}'?" if guess else ""
        return f"unknown key '{key}'.{hint}", f"use one of: {', '.join(sorted(allowed))}"
    if kind == "missing":
        return "this key is required", "add it"
    if kind == "literal_error":
        return err["msg"], "pick one of the allowed values above"
    message = err["msg"].removeprefix("Value error, ")
    if "; fix: " in message:  # a check that knows the fix says it (the index's sweep:)
        message, fix = message.split("; fix: ", 1)
        return message, fix
    return message, "see docs/recipes.md and its key reference"


def _allowed_keys(model: type[BaseModel], path: KeyPath, data: Any = None) -> list[str]:
    """The keys the model at ``path`` takes; an ``index:`` block's model is its kind's,
    which ``data`` (the recipe as written) names."""
    current: Any = model
    for part in path:
        data = _step(data, part)
        if isinstance(part, int):
            continue
        field_info = getattr(current, "model_fields", {}).get(part)
        if field_info is None:
            return []
        annotation = field_info.annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        for c in candidates:
            inner = [c, *getattr(c, "__args__", ())]
            found = next(
                (x for x in inner if isinstance(x, type) and issubclass(x, BaseModel)), None)
            if found:
                current = _kind_model(found, data)
                break
        else:
            return []
    return list(getattr(current, "model_fields", {}))


def _step(data: Any, part: Any) -> Any:
    if isinstance(data, Mapping) and part in data:
        return data[part]
    if isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data):
        return data[part]
    return None


def _kind_model(found: type[BaseModel], data: Any) -> type[BaseModel]:
    """A registered index kind's options model in place of the kinds' base."""
    if found is not KindOptions or not isinstance(data, Mapping):
        return found
    kind = data.get("kind", DEFAULT_VECTOR_KIND)
    return INDEX_KINDS.get(kind).options if kind in INDEX_KINDS.names() else found


def recipe_from_located(located: Located, file: Path) -> Recipe:
    located = resolve_graph_files(located, file)  # graph paths: from the recipe's folder
    try:
        recipe = Recipe.model_validate(located.data)
    except ValidationError as exc:
        # A misspelt key also makes the real key "missing": report the misspelling first.
        errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
        err = errors[0]
        path = _loc_to_path(err["loc"])
        named = re.match(r"Value error, '(\w+)' must be a number", err["msg"])
        if named:  # raised on the model, about one of its keys: point at that key's line
            path = (*path, named.group(1))
        where_file, line = located.where(path)
        message, fix = _describe(err, Recipe, path, located.data)
        if err["type"] == "value_error" and isinstance(err.get("ctx", {}).get("error"), InputError):
            inner: InputError = err["ctx"]["error"]
            message, fix = inner.message, inner.fix or fix
        extra = len(exc.errors()) - 1
        more = f" ({extra} more problem(s) after this one)" if extra else ""
        raise InputError(
            message=message + more,
            file=where_file or file,
            line=line,
            field=".".join(str(p) for p in path) or None,
            fix=fix,
        ) from None
    _check_quantization_methods(recipe, located, file)
    _check_measures(recipe, located, file)
    if recipe.pipelines:
        check_pipelines(recipe, located, file)
    if recipe.batch_sensitivity is not None:
        _check_sensitivity_variants(recipe, located, file)
    return recipe


def _check_quantization_methods(recipe: Recipe, located: Located, file: Path) -> None:
    for i, variant in enumerate(recipe.variants):
        if variant.quantization is None:
            continue
        path: KeyPath = ("reference",) if i == 0 else ("candidates", i - 1)
        params = {k: v for k, v in variant.quantization.items() if k != "method"}
        try:
            validate_quantization(variant.quantization["method"], params)
        except InputError as exc:
            key = (exc.field or "quantization").split(".")[-1]
            where_file, line = located.where((*path, "quantization", key))
            raise InputError(message=exc.message, file=where_file or file, line=line,
                             field=f"{'.'.join(map(str, path))}.quantization.{key}",
                             fix=exc.fix) from None


def _check_sensitivity_variants(recipe: Recipe, located: Located, file: Path) -> None:
    """``batch_sensitivity.variants`` names candidates that encode a side: one that
    borrows both sides encodes no text, so the run skipped it without a word."""
    candidates = {c.name: c for c in recipe.candidates}
    for i, name in enumerate((recipe.batch_sensitivity and recipe.batch_sensitivity.variants)
                             or []):
        where_file, line = located.where(("batch_sensitivity", "variants", i))
        candidate = candidates.get(name)
        if candidate is None:
            raise InputError(
                message=f"batch_sensitivity.variants names '{name}', which is not a "
                "candidate", file=where_file or file, line=line,
                field=f"batch_sensitivity.variants.{i}",
                fix=f"name one of: {', '.join(candidates) or '(no candidates)'}")
        if candidate.documents is not None and candidate.queries is not None:
            raise InputError(
                message=f"batch_sensitivity.variants names '{name}', which borrows both "
                "sides (documents: and queries:): it encodes no text, so no batch "
                "composition can change its vectors", file=where_file or file, line=line,
                field=f"batch_sensitivity.variants.{i}",
                fix=f"remove '{name}' from batch_sensitivity.variants")


def _check_measures(recipe: Recipe, located: Located, file: Path) -> None:
    def check(text: str, path: KeyPath, against: str | None) -> None:
        try:
            measure = parse_measure(text)
        except InputError as exc:
            where_file, line = located.where(path)
            raise InputError(message=exc.message, file=where_file or file, line=line,
                             field=".".join(map(str, path)), fix=exc.fix) from None
        if against and measure.against != against:
            where_file, line = located.where(path)
            raise InputError(
                message=f"'{text}' is measured against {measure.against}, not {against}",
                file=where_file or file, line=line, field=".".join(map(str, path)),
                fix=f"set against: {measure.against}",
            )

    for i, m in enumerate(recipe.metrics):
        check(m, ("metrics", i), "qrels")
    for i, m in enumerate(recipe.reference_metrics):
        check(m, ("reference_metrics", i), "reference")
    for i, g in enumerate(recipe.gates):
        check(g.metric, ("gates", i, "metric"), g.against)
        try:
            gate_spec(g, recipe.stats.confidence, recipe.stats)
        except InputError as exc:
            where_file, line = located.where(("gates", i))
            raise InputError(message=exc.message, file=where_file or file, line=line,
                             field=f"gates.{i}.{(exc.field or 'gate').split('.')[-1]}",
                             fix=exc.fix) from None


# What a recipe given as a dict or a Recipe is called in messages; its paths resolve from
# the working folder.
INLINE_RECIPE = Path("<python recipe>")


def _plain_copy(value: Any) -> Any:
    """A deep copy with tuples as lists, as YAML would give: the caller's dict is never
    shared with the recipe, and a value YAML cannot hold (a Path, a date) reaches
    validation, which names its key (exit 2), instead of failing a JSON round trip."""
    if isinstance(value, Mapping):
        return {k: _plain_copy(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain_copy(v) for v in value]
    return value


@dataclass(frozen=True)
class RecipeSource:
    """A validated recipe and where it came from. The plan stage needs the YAML's line
    numbers (``located``) to point each problem at its line, and the resolved ``path``
    (a built-in name becomes its file) to name the file and find the recipe folder."""

    recipe: Recipe
    path: Path
    located: Located


def load_recipe_source(source: str | Path | Mapping[str, Any] | Recipe,
                       overrides: Mapping[str, Any] | None = None, *,
                       file: Path | None = None) -> RecipeSource:
    """The one way a recipe is read: resolve the name, load the YAML (with ``include:``),
    apply ``overrides`` (top-level keys replaced), validate.

    ``source``: a recipe file, a built-in recipe's name (``quickstart``: see
    :mod:`evalq.core.locations`), a dict with a recipe's keys, or a loaded ``Recipe``.
    ``file`` names a dict or ``Recipe`` in messages (default ``<python recipe>``)."""
    overrides = dict(overrides or {})
    if isinstance(source, Recipe):
        data = source.model_dump(mode="json", exclude_unset=True)
        located, path = Located({**data, **overrides}), file or INLINE_RECIPE
    elif isinstance(source, Mapping):
        located, path = Located({**_plain_copy(source), **overrides}), file or INLINE_RECIPE
    else:
        path = resolve_recipe(source)
        located = load_yaml(path)
        if overrides:  # keep the file's line numbers for the keys not overridden
            located = Located({**located.data, **overrides},
                              {k: v for k, v in located.lines.items() if k[0] not in overrides})
    return RecipeSource(recipe_from_located(located, path), path, located)


def load_recipe(source: str | Path | Mapping[str, Any] | Recipe,
                overrides: Mapping[str, Any] | None = None, *,
                file: Path | None = None) -> Recipe:
    """Load and validate a recipe (see :func:`load_recipe_source`, which also keeps the
    resolved path and the YAML's line numbers)."""
    return load_recipe_source(source, overrides, file=file).recipe
