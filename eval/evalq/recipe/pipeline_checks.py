"""The checks of a recipe's ``pipelines:`` that need the whole recipe: dense first-stage
variants that exist, measures that parse and are measured against what each list says,
unique names, reranker quantization methods their backends apply. The pipeline models
themselves are declared in :mod:`evalq.plan.pipelines`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalq.core.errors import InputError
from evalq.engines.quantize import METHODS, validate_quantization
from evalq.engines.registry import reranker_backend
from evalq.measure.registry import parse_measure
from evalq.plan.pipelines import PipelineSpec
from evalq.recipe.yamlsource import KeyPath, Located

if TYPE_CHECKING:  # the schema imports this module to run the checks
    from evalq.recipe.schema import Recipe


def check_pipelines(recipe: Recipe, located: Located, file: Path) -> None:
    """What needs the whole recipe: dense variants exist, measures parse and are measured
    against what the pipeline fields say, names are unique."""

    variants = {v.name for v in recipe.variants}
    names = [p.name for p in recipe.pipelines]

    def fail(path: KeyPath, message: str, fix: str) -> InputError:
        where_file, line = located.where(path)
        return InputError(message=message, file=where_file or file, line=line,
                          field=".".join(map(str, path)), fix=fix)

    if len(set(names)) != len(names):
        raise fail(("pipelines",), f"pipeline names repeat: {', '.join(names)}",
                   "give every pipeline its own name")
    for i, spec in enumerate(recipe.pipelines):
        base: KeyPath = ("pipelines", i)
        fs = spec.first_stage
        if fs.kind == "dense":
            for j, name in enumerate([fs.reference, *fs.candidates]):
                if name is not None and name not in variants:
                    key: KeyPath = (*base, "first_stage",
                                    *(("reference",) if j == 0 else ("candidates", j - 1)))
                    raise fail(key, f"dense first stage names unknown variant '{name}'",
                               f"use one of the recipe's variants: {', '.join(sorted(variants))}")
        _check_reranker_methods(spec, base, fail)
        for field_name, against in (("metrics", "qrels"), ("reference_metrics", "reference"),
                                    ("fidelity_metrics", "reranker")):
            for j, text in enumerate(getattr(spec, field_name)):
                path = (*base, field_name, j)
                try:
                    measure = parse_measure(text)
                except InputError as exc:
                    raise fail(path, exc.message, exc.fix or "") from None
                if measure.against != against:
                    raise fail(path, f"'{text}' is measured against {measure.against}, not "
                               f"{against}", f"move it to the list for {measure.against}")
        for j, gate in enumerate(spec.gates):
            path = (*base, "gates", j, "metric")
            try:
                measure = parse_measure(gate.metric)
            except InputError as exc:
                raise fail(path, exc.message, exc.fix or "") from None
            if measure.against != gate.against:
                raise fail(path, f"'{gate.metric}' is measured against {measure.against}",
                           f"write against: {measure.against}")
            if not measure.higher_is_better:
                raise fail(path, f"{measure.name} is better when lower; gates take floors on "
                           "measures where higher is better", "gate score_tau, score_spearman "
                           "or rerank_overlap@k instead (the drift figures are reported)")
            if gate.against == "reranker" and gate.stage != "reranker":
                raise fail((*base, "gates", j, "stage"), "fidelity measures compare rerankers "
                           "on identical candidate lists: they exist for stage reranker only",
                           "write stage: reranker")
            listed = {parse_measure(m).name for m in
                      [*spec.metrics, *spec.reference_metrics, *spec.fidelity_metrics]}
            if measure.name not in listed:
                raise fail(path, f"gate on {measure.name}, which the pipeline does not measure",
                           f"add {measure.name} to pipelines[{i}].{_list_for(gate.against)}")


def _check_reranker_methods(spec: PipelineSpec, base: KeyPath,
                            fail: Callable[[KeyPath, str, str], InputError]) -> None:
    """A reranker variant's quantization method must be one its backend applies (the
    methods declare their backends): bitsandbytes or torch dynamic int8 in-process,
    ``w8a8-int8`` (a checkpoint vLLM loads) on vllm, nothing on a running server. Refused
    at load time, before any model or first stage runs."""

    for j, variant in enumerate(spec.reranker.variants):
        if variant.quantization is None:
            continue
        where = ("reference",) if j == 0 else ("candidates", j - 1)
        key: KeyPath = (*base, "reranker", *where, "quantization", "method")
        method = variant.quantization["method"]
        if method not in METHODS:
            raise fail(key, f"unknown quantization method '{method}'",
                       f"use one of: {', '.join(METHODS)}")
        backends = METHODS[method].backends
        if variant.backend in backends:
            _check_reranker_params(method, variant.quantization, (*base, "reranker", *where),
                                   fail)
            continue
        ok = [m for m, s in METHODS.items() if variant.backend in s.backends and m != "dtype"]
        fix = (f"on backend {variant.backend} use one of {', '.join(ok)}" if ok else
               f"remove quantization: backend {variant.backend} scores on a running server, "
               "whose quantization is chosen where it starts")
        if reranker_backend(variant.backend).quantized_by == "engine":
            fix += " (vLLM's own methods go in vllm: {quantization: ...})"
        raise fail(key, f"reranker variant '{variant.name}': quantization method '{method}' "
                   f"is applied by backend {' or '.join(backends)}, not {variant.backend}",
                   f"{fix}; or set backend: {backends[0]}")


def _check_reranker_params(method: str, quantization: dict[str, Any], where: KeyPath,
                           fail: Callable[[KeyPath, str, str], InputError]) -> None:
    """The method's parameters, checked when the recipe is read as a dense variant's are
    (a pipeline reranker's ``calibration_texts: 0`` passed validate and was refused only
    after the run had loaded its models)."""
    params = {k: v for k, v in quantization.items() if k != "method"}
    try:
        validate_quantization(method, params)
    except InputError as exc:
        key = (exc.field or "quantization").split(".")[-1]
        raise fail((*where, "quantization", key), exc.message, exc.fix or "") from None


def _list_for(against: str) -> str:
    return {"qrels": "metrics", "reference": "reference_metrics",
            "reranker": "fidelity_metrics"}[against]
