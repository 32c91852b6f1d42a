"""The checks of ``search:`` that need the whole recipe, and its :class:`SearchPlan`.

The section parses on its own (:class:`evalq.plan.search.SearchSection`: unknown keys,
empty axes, non-positive widths, rescoring without codes); what it names must also exist
and fit: weight variants that are the recipe's variants, encoded at full width in float
(the search derives every width and precision from that one encoding), a drop gate to
certify against, widths within the model's, enough queries to confirm, a price when the
cost is dollars, and a grid no larger than ``max_combinations`` unless the run was told
``--yes``. Every problem goes to the plan's list (exit 2, all at once).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalq.core.errors import InputError
from evalq.encode.rates import MeasuredRate, RateLedger
from evalq.engines.modelinfo import embedding_dim
from evalq.plan.search import (
    Combination,
    SearchPlan,
    build_grid,
    check_dims,
    check_split,
    search_plan,
)
from evalq.plan.types import VariantPlan
from evalq.recipe.plan_variants import Problems


def plan_search(recipe: Any, variant_plans: Sequence[VariantPlan], problems: Problems, *,
                max_queries: int | None, max_docs: int | None,
                confirm_large: bool, cache_dir: Path | None = None) -> SearchPlan | None:
    """The recipe's search resolved, its problems added to ``problems`` (None when the
    recipe has no ``search:`` or it cannot be planned). With ``cache_dir``, a database
    index option without a folder of its own keeps its tables and shards under the cache
    (:meth:`evalq.retrieve.kinds.KindOptions.with_home`), as a variant's index does."""
    section = recipe.search
    if section is None:
        return None
    before = len(problems.items)
    _check_weights(recipe, section, variant_plans, problems)
    _check_gates(recipe, problems)
    if section.cost == "dollars_per_million_queries" and recipe.capacity is None:
        problems.add(("search", "cost"), "cost dollars_per_million_queries needs a price "
                     "per replica-hour, and the recipe has no capacity section",
                     "add capacity: {target_qps: ..., dollars_per_replica_hour: ...}, or use "
                     "cost: index_bytes / weight_bytes / queries_per_s")
    queries = max_queries or recipe.max_queries
    if queries is not None:
        try:
            check_split(section, queries)
        except InputError as exc:
            problems.add(("search", "split"), f"with max_queries {queries}: {exc.message}",
                         exc.fix or "", field=exc.field)
    _check_width(section, variant_plans, problems)
    combinations, _ = build_grid(section)
    if not combinations:
        problems.add(("search",), "the grid is empty: every index option is paired with "
                     "quantized vectors, which an index kind stores in its own form",
                     "add {quantize: none} to search.vectors, or remove search.index")
    _check_names(recipe, combinations, problems)
    if len(combinations) > section.max_combinations and not confirm_large:
        problems.add(("search", "max_combinations"),
                     f"the grid has {len(combinations)} combinations, more than "
                     f"search.max_combinations {section.max_combinations}",
                     f"raise search.max_combinations to {len(combinations)}, shrink an axis, "
                     "or pass --yes to evalq run")
    if len(problems.items) > before:
        return None
    docs = max_docs or recipe.max_docs
    if cache_dir is not None and section.index:
        section = section.model_copy(
            update={"index": [o.with_home(cache_dir) for o in section.index]})
    return search_plan(section, recipe.stats.confidence, len(recipe.datasets),
                       queries + docs if queries and docs else None,
                       rates=_measured_rates(section, variant_plans, cache_dir),
                       variants=recipe.variants)


def _measured_rates(section: Any, variant_plans: Sequence[VariantPlan],
                    cache_dir: Path | None) -> dict[str, MeasuredRate]:
    """The weight variants' rates an earlier run measured on this host (none without a
    cache: ``--no-cache`` keeps no ledger)."""
    if cache_dir is None:
        return {}
    planned = {vp.name: vp for vp in variant_plans}
    names = [name for name in section.weights if name in planned]
    rates = RateLedger(cache_dir).lookup_all([planned[n].rate_identity() for n in names])
    return {name: rate for name, rate in zip(names, rates, strict=True) if rate is not None}


def _check_weights(recipe: Any, section: Any, variant_plans: Sequence[VariantPlan],
                   problems: Problems) -> None:
    """Each weight names a selected variant that is encoded at full width in float."""
    variants = {v.name: v for v in recipe.variants}
    selected = {vp.name for vp in variant_plans}
    for i, name in enumerate(section.weights):
        where = ("search", "weights", i)
        variant = variants.get(name)
        if variant is None:
            problems.add(where, f"search.weights names '{name}', which is not a variant of "
                         "the recipe", f"name one of: {', '.join(variants)} (or add a "
                         f"candidate named '{name}')")
        elif name not in selected:
            problems.add(where, f"search.weights names '{name}', which --only left out",
                         f"add --only {name}, or run without --only")
        elif (variant.vectors.quantize != "none" or variant.vectors.dims is not None
              or variant.searches_index):
            problems.add(where, f"weight variant '{name}' sets vectors or index; the search "
                         "derives every precision, width and index from one full-width "
                         "float encoding of each weight variant",
                         f"remove vectors/index from '{name}' and put the values on the "
                         "search's axes (search.vectors, search.dims, search.index)")


def _check_width(section: Any, variant_plans: Sequence[VariantPlan],
                 problems: Problems) -> None:
    """Widths within the model's, read from its config (a weight variant's model, else the
    reference's; the run checks again on the vectors themselves)."""
    ordered = sorted(variant_plans, key=lambda vp: vp.name not in section.weights)
    for vp in ordered:
        width = embedding_dim(vp.model_path) if vp.model_path else None
        if width is None:
            continue
        try:
            check_dims(section, width)
        except InputError as exc:
            problems.add(("search", "dims"), exc.message, exc.fix or "")
            return
        for i, options in enumerate(section.index or []):
            for dims in section.dims or [width]:
                try:
                    options.check_width(dims, "index")
                except InputError as exc:
                    problems.add(("search", *(exc.field or "index").split(".")[:1], i,
                                  *(exc.field or "index").split(".")[1:]),
                                 f"at dims {dims}: {exc.message}", exc.fix or "")
                    break
        return


def _check_names(recipe: Any, combinations: Sequence[Combination],
                 problems: Problems) -> None:
    """A combination's run and per-query files are named after it, beside the variants'
    and pipelines' own: a variant or pipeline of the same name would have its files
    overwritten by the combination's (or the reverse) and be decided on the other's."""
    names = {c.name for c in combinations}
    owners = [(("reference", "name") if i == 0 else ("candidates", i - 1, "name"), v.name)
              for i, v in enumerate(recipe.variants)]
    owners += [(("pipelines", i, "name"), p.name) for i, p in enumerate(recipe.pipelines)]
    for where, name in owners:
        if name in names:
            problems.add(where, f"'{name}' is also the name of a search combination, whose "
                         "run and per-query files would overwrite this one's",
                         f"rename '{name}' (names starting with 's.' are the search's)")


def _check_gates(recipe: Any, problems: Problems) -> None:
    """The search certifies against the recipe's gates, one of which must bound a drop:
    its metric is the frontier's quality."""
    if not any(g.max_drop is not None and g.against == "qrels" for g in recipe.gates):
        problems.add(("gates",), "search: needs the recipe's gates to certify against, with "
                     "at least one allowed drop against qrels (its metric is the quality "
                     "the frontier is drawn from)",
                     "add gates: [{metric: nDCG@10, against: qrels, max_drop: 2%}]")
