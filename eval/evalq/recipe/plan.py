"""Recipe -> plan: everything a run will do, resolved and checked before any model loads.

A recipe that parses can still be impossible or pointless: a gate on a measure that is
never computed, ``quantization:`` on a backend that cannot apply it, ``device: cuda`` on a
CPU machine, gates with no candidate to judge, an output path that is a file. Without a
plan the runner would find these one at a time, some only after the reference has
encoded. :func:`build_plan` resolves every variant (model folder and weights fingerprint,
encoding settings, backend, device and its capability, which quantization applies, which
measures each gate needs, output folder, limits) and collects *every* problem, each an
:class:`~evalq.core.errors.InputError` naming file, line, field and fix, raised together as
one :class:`PlanError` (exit 2). ``evalq validate`` and ``evalq run`` call it first;
``evalq plan`` prints it.

What the plan reads is declared by the things it plans for: quantization methods say
which backends and devices they apply to (``quantize.METHODS``), backends say which
devices, dtypes and model kinds they serve (their specs in ``backends/registry.py``).
Route probing of HTTP endpoints is not done here (the plan makes no network calls). The
checks of one variant (backend, device and capability, quantization, model and settings,
cache key) live in :mod:`evalq.recipe.plan_variants`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from evalq.core.atomicio import check_output_location
from evalq.core.errors import InputError
from evalq.core.host import host_facts
from evalq.core.redact import stored_recipe_form
from evalq.core.values import EncodingSettings
from evalq.engines.capability import detect_device
from evalq.engines.lasttoken import token_summary
from evalq.engines.quantize import METHODS
from evalq.engines.registry import BACKENDS
from evalq.measure.registry import parse_measure
from evalq.plan.load import launch_spec
from evalq.plan.loadbudget import load_budget
from evalq.plan.types import GatePlan, Limits, ParityPlan, Plan, VariantPlan
from evalq.recipe.arithmetic import planned_arithmetic
from evalq.recipe.pipeline_budget import pipeline_budgets
from evalq.recipe.plan_datasets import check_datasets, recipe_manifests
from evalq.recipe.plan_search import plan_search
from evalq.recipe.plan_sides import plan_sides
from evalq.recipe.plan_variants import (
    Problems,
    cache_text,
    check_quantization,
    check_serving,
    resolve_model,
    variant_endpoint,
)
from evalq.recipe.schema import load_recipe_source
from evalq.recipe.yamlsource import load_yaml


class PlanError(InputError):
    """Every problem the plan found, reported at once (exit 2)."""

    def __init__(self, problems: Sequence[InputError]) -> None:
        self.problems = list(problems)
        super().__init__(message=f"{len(self.problems)} problem(s) in the recipe")

    def __str__(self) -> str:
        if len(self.problems) == 1:
            return str(self.problems[0])
        lines = [f"{len(self.problems)} problems, all found before anything loaded:"]
        lines += [f"  {i}. {p}" for i, p in enumerate(self.problems, 1)]
        return "\n".join(lines)


def _streamed_datasets(recipe: Any, path: Path) -> list[str]:
    """Names of the recipe's datasets with ``stream:`` (inline, or in the manifest a name
    resolves to; a name that resolves to nothing is the dataset loader's to report)."""

    manifests: dict[str, Any] | None = None
    names = []
    for entry in recipe.datasets:
        if isinstance(entry, dict):
            if entry.get("stream") is not None:
                names.append(str(entry.get("name", entry.get("source", "?"))))
            continue
        if manifests is None:
            manifests = recipe_manifests(path)
        found = manifests.get(entry)
        if found is not None and found[1].stream is not None:
            names.append(entry)
    return names


def _check_streamed(recipe: Any, path: Path, selected: Sequence[Any],
                    problems: Problems) -> None:
    """What needs a whole corpus in memory is refused on a streamed one: vector
    quantization and ANN indexes are built over the full document matrix, batch
    sensitivity and rerank pipelines read document texts by position."""
    streamed = _streamed_datasets(recipe, path)
    if not streamed:
        return
    which = ", ".join(streamed)
    fix = (f"run it on a loaded corpus (remove `stream:` from dataset {which}), or remove "
           "it from this recipe")
    for i, variant in enumerate(recipe.variants):
        if variant not in selected:
            continue
        if variant.vectors.quantize != "none" or variant.vectors.dims is not None:
            key = "quantize" if variant.vectors.quantize != "none" else "dims"
            problems.add((*_variant_path(i), "vectors", key),
                         f"variant '{variant.name}' quantizes or truncates its document "
                         "vectors, which "
                         f"needs the whole document matrix; dataset {which} is streamed and "
                         "searched as exact float shards", fix)
        if variant.searches_index and variant.index is not None:
            problems.add((*_variant_path(i), "index"),
                         f"variant '{variant.name}' builds a '{variant.index.kind}' index over "
                         f"the whole corpus; dataset {which} is streamed and searched as "
                         "exact float shards", fix)
    for key in ("batch_sensitivity", "pipelines", "search"):
        if getattr(recipe, key):
            problems.add((key,), f"`{key}` reads document texts from a loaded corpus; "
                         f"dataset {which} is streamed", fix)


def _homed(variant: Any, cache_dir: Path | None) -> Any:
    """The variant with its index's default data folder under the cache
    (:meth:`evalq.retrieve.kinds.KindOptions.with_home`): a database's tables and shards
    outlive the run, and the next run of the recipe reuses them. ``--no-cache``
    (``cache_dir`` None) leaves them in a temporary folder."""
    index = getattr(variant, "index", None)
    if index is None or cache_dir is None:
        return variant
    return variant.model_copy(update={"index": index.with_home(cache_dir)})


def _variant_path(i: int) -> tuple[Any, ...]:
    return ("reference",) if i == 0 else ("candidates", i - 1)


def required_depth(recipe: Any) -> int:
    """How deep every dense variant searches: the deepest cutoff of a metric or gate, and
    the deepest first stage of a pipeline (which reranks a dense variant's stored run).
    Computed here once; the run searches to the plan's depth."""

    texts = [*recipe.metrics, *recipe.reference_metrics, *(g.metric for g in recipe.gates)]
    cutoffs = [parse_measure(t).cutoff or 0 for t in texts]
    return max([10, *cutoffs, *(p.max_depth for p in recipe.pipelines)])


def build_plan(recipe: Any, path: str | Path, *, output: str | Path | None = None,
               only: Sequence[str] | None = None, max_queries: int | None = None,
               max_docs: int | None = None, use_cache: bool = True,
               located: Any = None, detect: Any = None, machine: bool = True,
               confirm_large: bool = True, writes_results: bool = True) -> Plan:
    """Resolve ``recipe`` (a :class:`evalq.recipe.schema.Recipe`) into a :class:`Plan`, or raise
    :class:`PlanError` listing every problem. ``detect`` (default
    :func:`evalq.engines.capability.detect_device`) is injectable for tests.
    ``confirm_large`` False (``evalq run`` without ``--yes``) refuses a search grid above
    its ``max_combinations``; printing or validating a plan never refuses it.
    ``writes_results`` False (``evalq certify`` and ``verify``, which plan a stored recipe
    and write no results folder of it) leaves the results folder's location unchecked."""

    path = Path(path)
    if located is None and path.is_file():
        located = load_yaml(path)
    problems = Problems(path, located, machine)
    selected = _selected_variants(recipe, only, problems)
    gate_plans = _plan_gates(recipe, problems)
    variant_plans = _plan_variants(recipe, selected, problems, detect, gate_plans, use_cache)
    if any(v.documents is not None or v.queries is not None for v in selected):
        sides = plan_sides(recipe, path, variant_plans, problems,
                           streamed=_streamed_datasets(recipe, path),
                           limits=(max_queries or recipe.max_queries,
                                   max_docs or recipe.max_docs))
        variant_plans = [replace(vp, sides=sides[vp.name]) if vp.name in sides else vp
                         for vp in variant_plans]
    _check_streamed(recipe, path, selected, problems)
    search = plan_search(recipe, variant_plans, problems, max_queries=max_queries,
                         max_docs=max_docs, confirm_large=confirm_large,
                         cache_dir=Path(recipe.cache_dir) if use_cache else None)
    check_datasets(recipe, path, problems)  # as the loader will parse them (validate = run)
    out, cache_dir = _plan_outputs(recipe, output, use_cache, problems, writes_results)

    if problems.items:
        raise PlanError(problems.items)
    depth = required_depth(recipe)
    return Plan(
        recipe=recipe.name, recipe_file=path,
        datasets=tuple(d if isinstance(d, str) else str(d.get("name", d)) for d in
                       recipe.datasets),
        dataset_specs=tuple(recipe.datasets),
        variants=tuple(variant_plans), variant_names=tuple(v.name for v in recipe.variants),
        metrics=tuple(parse_measure(m).name for m in recipe.metrics),
        reference_metrics=tuple(parse_measure(m).name for m in recipe.reference_metrics),
        gates=tuple(gate_plans), output=out, cache_dir=cache_dir,
        limits=Limits(max_queries=max_queries or recipe.max_queries,
                      max_docs=max_docs or recipe.max_docs, depth=depth,
                      resamples=recipe.stats.resamples, confidence=recipe.stats.confidence,
                      cache_chunk=recipe.cache_chunk),
        work_dir=Path(recipe.cache_dir), title_separator=recipe.title_separator,
        batch_tokens=recipe.batch_tokens, executor=recipe.executor,
        parity=ParityPlan(recipe.parity.enabled, recipe.parity.texts,
                          recipe.parity.min_cosine),
        sections=recipe.sections(), recorded=stored_recipe_form(recipe.model_dump(mode="json")),
        only=tuple(only) if only else None, load=recipe.load, capacity=recipe.capacity,
        machine_notes=tuple(problems.notes),
        pipeline_gates=tuple(_pipeline_gate_texts(recipe)),
        sensitivity=recipe.batch_sensitivity is not None,
        load_budget=load_budget(recipe.load).describe() if recipe.load else None,
        pipeline_budgets=tuple(b.describe() for b in pipeline_budgets(recipe, max_queries)),
        search=search,
    )


def _selected_variants(recipe: Any, only: Sequence[str] | None,
                       problems: Problems) -> list[Any]:
    """The reference and the candidates ``--only`` keeps (all without it)."""
    names = [v.name for v in recipe.variants]
    if only:
        unknown = sorted(set(only) - set(names))
        if unknown:
            problems.add((), f"--only names unknown variant(s) {', '.join(unknown)}",
                         f"choose from {', '.join(names)}", field="--only")
    return [recipe.reference] + [c for c in recipe.candidates if not only or c.name in only]


def _plan_gates(recipe: Any, problems: Problems) -> list[GatePlan]:
    """Each gate on a measure the run computes, and something for the gates to judge."""
    computed = set()
    for text in [*recipe.metrics, *recipe.reference_metrics]:
        with contextlib.suppress(InputError):  # config already refused a bad one
            computed.add(parse_measure(text).name)
    computed.add("cosine")  # per-text cosines are always stored
    gate_plans = []
    for i, g in enumerate(recipe.gates):
        try:
            measure = parse_measure(g.metric)
        except InputError as exc:
            problems.add_error(("gates", i, "metric"), exc)
            continue
        if measure.name not in computed:
            key = "metrics" if measure.against == "qrels" else "reference_metrics"
            problems.add(("gates", i, "metric"),
                         f"gate on '{g.metric}', which is not in '{key}', so it would never "
                         "be computed",
                         f"add {measure.name} to {key}, or gate on one of "
                         f"{', '.join(sorted(computed))}")
        targets = tuple(g.variants or [c.name for c in recipe.candidates])
        rule = f"max_drop {g.max_drop}" if g.max_drop is not None else f"min {g.min}"
        stat = f" ({g.stat})" if g.stat != "mean" else ""
        gate_plans.append(GatePlan(f"{measure.name}{stat} vs {g.against} {rule}",
                                   measure.name, g.against, targets, g.over == "pooled"))
    if recipe.gates and not recipe.candidates and recipe.search is None:
        problems.add(("candidates",),
                     "the recipe has gates but no candidates, so nothing would be judged and "
                     "the run would pass vacuously",
                     "add a candidate variant, or remove the gates")
    return gate_plans


def _plan_variants(recipe: Any, selected: Sequence[Any], problems: Problems, detect: Any,
                   gate_plans: list[GatePlan], use_cache: bool) -> list[VariantPlan]:
    """The selected variants in recipe order; the device is detected once, and only when a
    local backend that can run on a GPU will run (asking torch costs seconds of import, a
    good part of a warm ``evalq verify`` of an OpenVINO or ONNX Runtime candidate)."""
    device_info = None
    specs = [BACKENDS.get("embedding", v.backend) for v in selected]
    if any(s is not None and s.local and "cuda" in s.devices for s in specs):
        device_info = (detect or detect_device)()
    variant_plans = []
    for i, variant in enumerate(recipe.variants):
        if variant not in selected:
            continue
        vpath = _variant_path(i)
        variant_plans.append(_plan_variant(recipe, variant, vpath, i == 0, problems,
                                           device_info, METHODS, gate_plans, use_cache))
    return variant_plans


def _plan_outputs(recipe: Any, output: str | Path | None, use_cache: bool,
                  problems: Problems, writes_results: bool) -> tuple[Path, Path | None]:
    """Where things go: the results folder and the cache folder (None with --no-cache).
    The results folder is checked only where it is written: verify, on a deployment host,
    refused a certificate whose recipe's output (``results/<name>`` by default, under
    the working folder) could not be created there, though it writes nothing to it."""
    out = results_folder(recipe, output)
    if writes_results:
        _check_writable_dir(out, ("output",) if recipe.output else (), problems,
                            "--output" if output else ("output" if recipe.output else
                                                       "output (default results/<name>)"))
    cache_dir = Path(recipe.cache_dir) if use_cache else None
    if cache_dir is not None:
        _check_writable_dir(cache_dir, ("cache_dir",), problems, "cache_dir")
    return out, cache_dir


def results_folder(recipe: Any, output: str | Path | None = None) -> Path:
    """Where a run of ``recipe`` writes: ``--output``, else the recipe's ``output``, else
    ``results/<name>``."""
    return Path(output or recipe.output or Path("results") / recipe.name)


def _pipeline_gate_texts(recipe: Any) -> list[str]:
    out = []
    for p in recipe.pipelines:
        for g in p.gates:
            rule = f"max_drop {g.max_drop}" if g.max_drop is not None else f"min {g.min}"
            stat = f" ({g.stat})" if g.stat != "mean" else ""
            at = f" at depth {g.depth}" if g.depth is not None else ""
            out.append(f"pipeline {p.name}: {g.metric}{stat} vs {g.against} {rule} on "
                       f"{g.stage} combinations{at}")
    return out


def _plan_variant(recipe: Any, variant: Any, vpath: tuple[Any, ...], is_reference: bool,
                  problems: Problems, device_info: Any, methods: Any,
                  gate_plans: list[GatePlan], use_cache: bool) -> VariantPlan:
    support = BACKENDS.get("embedding", variant.backend)
    label = f"variant '{variant.name}'"
    device, device_name = check_serving(recipe, variant, vpath, label, support, device_info,
                                        problems)
    quant = check_quantization(variant, vpath, label, support, device, methods, problems)
    model_path, fingerprint, settings = resolve_model(recipe, variant, vpath, label, problems)
    endpoint = variant_endpoint(variant)
    gates = tuple(g.text for g in gate_plans if variant.name in g.variants)
    return VariantPlan(
        name=variant.name, role="reference" if is_reference else "candidate",
        backend=variant.backend + (f" ({variant.vllm.mode})" if variant.vllm else ""),
        dtype=variant.dtype, device=device, device_name=device_name, model_path=model_path,
        model_fingerprint=fingerprint, settings=settings, quantization=quant,
        vectors=variant.vectors.quantize + (f", {variant.vectors.dims} Matryoshka dims"
                                            if variant.vectors.dims else "")
        + (", float queries" if variant.vectors.queries == "float" else ""),
        endpoint=endpoint,
        cached=cache_text(support, endpoint, use_cache), gates=gates,
        options=_homed(variant, Path(recipe.cache_dir) if use_cache else None),
        where=".".join(map(str, vpath)), launch=launch_spec(recipe.load, variant.name),
        parity_subject=parity_subject(recipe, variant),
        tokens=token_summary(model_path, EncodingSettings(**settings))
        if model_path and settings else None,
        arithmetic=planned_arithmetic(variant, device, host_facts()))


def parity_subject(recipe: Any, variant: Any) -> Any:
    """The variant whose quantization decides whether ``variant`` must match the reference
    exactly: a served evalq graph (``onnx_from``) is held to what its source is (fp32
    exactly; a quantized graph's cosine is reported, as in-process)."""
    spec = launch_spec(recipe.load, variant.name)
    if spec is None or spec.onnx_from is None:
        return variant
    return next((v for v in recipe.variants if v.name == spec.onnx_from), variant)


def _check_writable_dir(folder: Path, key: tuple[Any, ...], problems: Problems,
                        name: str) -> None:
    """The folder can be created and written (the check every output goes through)."""
    try:
        check_output_location(folder, folder=True, what=name)
    except InputError as exc:
        problems.add(key, exc.message, exc.fix or "", field=name.split()[0])


# -- commands ------------------------------------------------------------------------


def plan_file(path: str | Path, **kwargs: Any) -> Plan:
    loaded = load_recipe_source(path)  # a file, or a built-in recipe's name
    return build_plan(loaded.recipe, loaded.path, located=loaded.located, **kwargs)


def _sides_line(v: VariantPlan) -> str:
    """What a variant that borrows a side encodes and reuses, and the width both sides
    are searched at: ``vectors.dims`` truncates a borrowed side as it does an encoded one."""
    dims = v.options.vectors.dims
    return v.sides.describe() + (f"; both sides truncated to vectors.dims {dims}"
                                 if dims is not None else "")


def describe_plan(plan: Plan) -> str:
    """The plan as text: what will load, encode, be cached and be gated."""
    lines = [f"plan for recipe '{plan.recipe}' ({plan.recipe_file})",
             f"  datasets: {', '.join(plan.datasets)}; limits: "
             + ", ".join(f"{k}={v}" for k, v in plan.limits.as_dict().items()),
             f"  measures: {', '.join(plan.metrics)} vs qrels; "
             f"{', '.join(plan.reference_metrics)} vs reference",
             f"  results: {plan.output}; cache: {plan.cache_dir or 'off'}",
             f"  host: {host_facts().describe()}"]
    for v in plan.variants:
        if not v.sides.builds_engine:  # issue 31: both sides borrowed, nothing loads
            lines.append(f"  {v.role} {v.name}: no engine, index vectors {v.vectors}")
            lines.append(f"      {_sides_line(v)}")
            lines += [f"      gate: {g}" for g in v.gates]
            continue
        quant = v.quantization["method"] if v.quantization else "none"
        lines.append(f"  {v.role} {v.name}: load {v.model_path or v.endpoint} "
                     f"[{(v.model_fingerprint or '')[:12]}] on {v.backend}, {v.dtype}, "
                     f"device {v.device} ({v.device_name}), quantization {quant}, "
                     f"index vectors {v.vectors}")
        if v.endpoint:
            lines.append(f"      endpoint {v.endpoint}")
        if v.settings:
            lines.append("      encode with " + ", ".join(f"{k}={v.settings[k]!r}"
                                                          for k in v.settings))
        if v.tokens:
            lines.append(f"      tokens: {v.tokens}")
        if v.arithmetic:
            lines.append(f"      arithmetic: {v.arithmetic}")
        if v.sides.borrows:
            lines.append(f"      {_sides_line(v)}")
        lines.append(f"      cache: {v.cached}")
        for g in v.gates:
            lines.append(f"      gate: {g}")
    lines += [f"  gate: {g}" for g in plan.pipeline_gates]
    lines += [f"  {b}" for b in plan.pipeline_budgets]
    if plan.load_budget:
        lines.append(f"  {plan.load_budget}")
    if plan.search is not None:
        lines += [f"  {line}" for line in plan.search.describe()]
    lines.append("  " + exit_statement(plan))
    return "\n".join(lines)


def exit_statement(plan: Plan) -> str:
    """What decides the exit code: every kind of gate counts (embedding per-dataset and
    pooled, batch-sensitivity compositions, pipeline), and candidates no gate applies to
    are named: they are measured but never certified."""
    if plan.search is not None:
        return ("a search: exits 0 when it certifies a combination (the cheapest certified "
                "is recommended), 1 when it certifies none; the variants' own gates are "
                "reported beside it")
    if not plan.gates and not plan.pipeline_gates:
        return "no gates: the run reports figures and always exits 0"
    pooled = sum(1 for g in plan.gates if g.pooled)
    parts = [f"{len(plan.gates)} gate(s) on the embedding variants"
             + (f" ({pooled} pooled over the suite)" if pooled else "")]
    if plan.gates and plan.sensitivity:
        parts.append("decided under every batch composition of the measured candidates")
    if plan.pipeline_gates:
        parts.append(f"{len(plan.pipeline_gates)} pipeline gate(s)")
    text = "exits 1 if any gate fails or is inconclusive: " + "; ".join(parts)
    ungated = [v.name for v in plan.variants if v.role == "candidate" and not v.gates]
    if ungated:
        text += (f"; ungated (measured, not certified, never recommended): "
                 f"{', '.join(ungated)}")
    return text
