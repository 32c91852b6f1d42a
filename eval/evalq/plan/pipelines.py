"""Two-stage pipelines in a recipe: a first stage, depths, a reranker and their variants.

```yaml
pipelines:
  - name: bm25-ce
    first_stage: {kind: bm25, bm25: {k1: 1.2, b: 0.75, stemmer: english}}
    depths: [20, 50]                    # candidates reranked per query; several allowed
    cutoff: 10                          # what the pipeline returns
    reranker:
      model: "fixture:minilm-cross-encoder"
      kind: cross-encoder               # or bi-encoder (cosine of an embedding model)
      activation: sigmoid               # sigmoid | none | softmax (+ label)
      reference: {name: fp32}
      candidates: [{name: bf16, dtype: bfloat16}]
  - name: dense-ce
    first_stage: {kind: dense, reference: fp32, candidates: [dyn-int8]}   # recipe variants
    ...
```

Each pipeline runs its reference (first-stage reference → reranker reference) and the
combinations of their variants, so a change can be attributed to the retriever, the
reranker, or their interaction. The models here are checked on their own; the checks that
need the whole recipe (dense variants that exist, measures that parse) are in
:func:`evalq.recipe.pipeline_checks.check_pipelines`, which the schema calls after
parsing. The recipe composes these declarations and the pipeline executor
(``evalq.execute.pipelines``) reads them without importing the recipe.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from evalq.core.names import PathName
from evalq.core.options import StrictOptions
from evalq.engines.options import RerankerModel, RerankerVariantOptions
from evalq.engines.registry import (
    BACKENDS,
    allowed_backend,
    backend_enum,
    options_misplaced,
    reranker_backend,
)
from evalq.retrieve.firststage import Bm25Options


class FirstStageSpec(StrictOptions):
    kind: Literal["bm25", "dense", "run"]
    name: PathName | None = None
    bm25: Bm25Options | None = None
    # dense: names of the recipe's (embedding) variants; the reference defaults to the
    # recipe's reference. Their rankings are the ones `evalq run` already searched.
    reference: str | None = None
    candidates: list[str] = Field(default_factory=list)
    run: str | None = None  # kind run: a TREC run file (relative to the recipe)

    @model_validator(mode="after")
    def _options(self) -> FirstStageSpec:
        if self.kind != "bm25" and self.bm25 is not None:
            raise ValueError("'bm25' options apply to first_stage kind bm25 only")
        if self.kind == "run" and not self.run:
            raise ValueError("first_stage kind run needs 'run: path/to/run.trec'")
        if self.kind != "run" and self.run is not None:
            raise ValueError("'run' applies to first_stage kind run only")
        if self.kind != "dense" and (self.reference is not None or self.candidates):
            raise ValueError("'reference' and 'candidates' name dense variants: "
                             "first_stage kind dense only")
        return self

    @property
    def label(self) -> str:
        return self.name or self.kind


class RerankerVariant(RerankerVariantOptions):
    """A reranker variant: what its backend builds (declared by the engines,
    :class:`evalq.engines.options.RerankerVariantOptions`) and the checks that need the
    backend registry."""

    # a registered reranker backend (engines/registry.py); the schema lists them
    backend: str = Field(default="inprocess", json_schema_extra=backend_enum("reranker"))

    @field_validator("backend", mode="before")
    @classmethod
    def _registered_backend(cls, value: Any) -> str:
        return allowed_backend("reranker", value)

    @model_validator(mode="after")
    def _backend_options(self) -> RerankerVariant:
        wrong = options_misplaced("reranker", self.backend,
                                  {key: getattr(self, key, None)
                                   for key in BACKENDS.option_keys("reranker")})
        if wrong:
            raise ValueError(wrong)
        spec = reranker_backend(self.backend)
        if self.dtype not in spec.dtypes:
            raise ValueError(f"reranker backend {self.backend} serves dtype "
                             f"{' or '.join(spec.dtypes)}, not {self.dtype}")
        if spec.devices and self.device != "auto" and self.device not in spec.devices:
            raise ValueError(f"reranker backend {self.backend} runs on "
                             f"{' or '.join(spec.devices)}, not {self.device}: use device: "
                             f"{spec.devices[0]} (or auto) for this reranker variant")
        if self.quantization is not None and not isinstance(self.quantization.get("method"),
                                                            str):
            raise ValueError("quantization needs 'method' (e.g. method: bitsandbytes)")
        return self


class RerankerSpec(RerankerModel):
    """A pipeline's reranker: the model as every reranker backend reads it
    (:class:`evalq.engines.options.RerankerModel`) and its variants."""

    reference: RerankerVariant = RerankerVariant(name="fp32")
    candidates: list[RerankerVariant] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique(self) -> RerankerSpec:
        names = [self.reference.name, *(c.name for c in self.candidates)]
        if len(set(names)) != len(names):
            raise ValueError(f"reranker variant names must be unique: {', '.join(names)}")
        if self.kind == "bi-encoder" and self.activation != "sigmoid":
            raise ValueError("a bi-encoder scores by cosine; 'activation' applies to "
                             "cross-encoders only")
        for variant in self.variants:  # what each backend declares it serves
            kinds = reranker_backend(variant.backend).model_kinds
            if self.kind not in kinds:
                raise ValueError(f"reranker variant '{variant.name}': backend "
                                 f"{variant.backend} serves {' or '.join(kinds)} rerankers, "
                                 f"not {self.kind}")
        return self

    @property
    def variants(self) -> list[RerankerVariant]:
        return [self.reference, *self.candidates]


class PipelineGate(StrictOptions):
    """A gate on one stage of a pipeline or on the whole of it.

    ``stage: pipeline`` applies to every candidate combination, ``retriever`` to the
    retriever-only ones (quantized first stage, reference reranker), ``reranker`` to the
    reranker-only ones (where the fidelity measures live, ``against: reranker``).
    """

    metric: str
    against: Literal["qrels", "reference", "reranker"] = "qrels"
    stage: Literal["pipeline", "retriever", "reranker"] = "pipeline"
    depth: int | None = Field(default=None, ge=1)  # default: every depth
    max_drop: str | float | None = None
    min: float | None = None
    stat: Literal["mean", "p1", "min"] = "mean"
    confidence: float | None = Field(default=None, gt=0.5, lt=1)

    @model_validator(mode="after")
    def _one_rule(self) -> PipelineGate:
        if (self.max_drop is None) == (self.min is None):
            raise ValueError("a gate needs exactly one of 'max_drop' (e.g. 1% or 0.01) or 'min'")
        if self.against != "qrels" and self.max_drop is not None:
            raise ValueError(f"a measure against the {self.against} has no reference value to "
                             "drop from; use min: (a floor)")
        return self


class PipelineSpec(StrictOptions):
    name: PathName
    first_stage: FirstStageSpec
    depths: list[int] = Field(default_factory=lambda: [50], min_length=1)
    cutoff: int = Field(default=10, ge=1)
    reranker: RerankerSpec
    metrics: list[str] = Field(default_factory=lambda: ["nDCG@10", "RR@10"])
    reference_metrics: list[str] = Field(default_factory=lambda: ["overlap@10"])
    fidelity_metrics: list[str] = Field(default_factory=lambda: [
        "score_tau", "score_spearman", "rerank_overlap@10", "abs_delta", "abs_delta_p99",
        "score_shift", "tie_rate"])
    gates: list[PipelineGate] = Field(default_factory=list)
    cache_chunk: int = Field(default=512, ge=1)  # pairs per score-cache commit

    @model_validator(mode="after")
    def _depths(self) -> PipelineSpec:
        if any(d < 1 for d in self.depths):
            raise ValueError(f"depths must be >= 1 (got {self.depths}): a depth is how many "
                             "first-stage candidates the reranker reads per query")
        if len(set(self.depths)) != len(self.depths):
            raise ValueError(f"depths repeat a value: {self.depths}")
        if self.cutoff > min(self.depths):
            raise ValueError(f"cutoff {self.cutoff} exceeds the smallest depth "
                             f"{min(self.depths)}: the pipeline cannot return more than it "
                             "reranked")
        for gate in self.gates:
            if gate.depth is not None and gate.depth not in self.depths:
                raise ValueError(f"gate depth {gate.depth} is not one of depths {self.depths}")
        return self

    @property
    def max_depth(self) -> int:
        return max(self.depths)
