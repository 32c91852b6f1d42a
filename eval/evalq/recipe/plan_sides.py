"""The plan's checks of borrowed sides (``documents:`` / ``queries:``, issue 31).

A variant that searches one side's vectors against another variant's (or a file's) is
only meaningful when both sides live in the same vector space: the same width, the same
model family, the same normalization. A mismatch would not crash, it would score badly,
and the report would blame the candidate; so it is refused here, before anything loads,
naming both sides and the fix. A vector file is checked as far as can be without loading
it: its header (np.load with ``mmap_mode='r'``), its ids, and that it has a row for every
document of the datasets as the run will slice them. Whether its vectors still match
today's stack is the run's probe (``evalq.execute.borrowed``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.errors import InputError
from evalq.data.manifest import load_datasets
from evalq.engines.modelinfo import embedding_dim
from evalq.plan.sides import REFERENCE, ProbeOptions, SidePlan, StoredVectors, VectorFile
from evalq.plan.types import VariantPlan
from evalq.recipe.plan_variants import Problems
from evalq.recipe.plan_vectorfiles import read_header, sample_norms


def plan_sides(recipe: Any, path: Path, planned: Sequence[VariantPlan], problems: Problems,
               *, streamed: Sequence[str], limits: tuple[int | None, int | None],
               ) -> dict[str, SidePlan]:
    """Each selected variant's :class:`SidePlan`; every problem into ``problems``."""
    by_name = {vp.name: vp for vp in planned}
    names = [v.name for v in recipe.variants]
    out: dict[str, SidePlan] = {}
    for i, variant in enumerate(recipe.variants):
        if variant.name not in by_name or (variant.documents is None
                                           and variant.queries is None):
            continue
        vpath: tuple[Any, ...] = ("reference",) if i == 0 else ("candidates", i - 1)
        label = f"variant '{variant.name}'"
        if i == 0:
            problems.add((*vpath, "documents" if variant.documents else "queries"),
                         f"{label} is the reference, which encodes both sides: it is what "
                         "candidates are judged against and what borrowed vectors come from",
                         "move documents:/queries: to a candidate (e.g. a candidate with "
                         "documents: reference)")
            continue
        if streamed:
            problems.add((*vpath, "documents" if variant.documents else "queries"),
                         f"{label} borrows vectors, which needs the whole corpus in memory; "
                         f"dataset {', '.join(streamed)} is streamed",
                         "remove `stream:` from the dataset, or the borrowed side")
            continue
        sides = SidePlan()
        for side in ("documents", "queries"):
            value = getattr(variant, side)
            if isinstance(value, str):
                lender = _lender(value, recipe, names, i, (*vpath, side), label, by_name,
                                 problems)
                if lender is not None:
                    _same_space(variant, by_name[variant.name], recipe.variants[
                        names.index(lender)], by_name[lender], (*vpath, side), label, problems)
                    sides = (replace(sides, documents=lender) if side == "documents"
                             else replace(sides, queries=lender))
            elif isinstance(value, StoredVectors):
                if side == "queries" and _in_a_database(value, (*vpath, side), label,
                                                        problems):
                    continue
                _check_files(value, recipe, path, (variant, by_name[variant.name]),
                             (*vpath, side), label, problems, limits)
                sides = (replace(sides, documents_file=value) if side == "documents"
                         else replace(sides, queries_file=value))
        out[variant.name] = sides
    return out


def _lender(value: str, recipe: Any, names: list[str], i: int, key: tuple[Any, ...],
            label: str, by_name: dict[str, VariantPlan], problems: Problems) -> str | None:
    """The variant ``value`` names, if it is an earlier, selected one."""
    name = recipe.reference.name if value == REFERENCE else value
    earlier = names[:i]
    fix = f"use reference or one of the variants listed before it: {', '.join(earlier)}"
    field = ".".join(map(str, key))
    if name == names[i]:
        problems.add(key, f"{label}: {field} names the variant itself; a side borrowed from "
                     "itself would never be encoded", fix)
    elif name in names[i + 1:]:
        problems.add(key, f"{label}: {field} names variant '{name}', which is listed after "
                     "it; variants run in recipe order, so its vectors do not exist yet",
                     f"{fix} (or move '{name}' above '{names[i]}')")
    elif name not in names:
        problems.add(key, f"{label}: {field} names unknown variant '{value}'", fix)
    elif name not in by_name:
        problems.add(key, f"{label}: {field} borrows from variant '{name}', which --only "
                     "leaves out", f"add {name} to --only")
    else:
        return name
    return None


def _same_space(variant: Any, plan: VariantPlan, lender: Any, lender_plan: VariantPlan,
                key: tuple[Any, ...], label: str, problems: Problems) -> None:
    """Model family and normalization agree on both sides. Not ``vectors.dims``: the
    borrowed vectors are the lender's as its engine made them (before its own
    truncation), and the borrower's ``vectors.dims`` truncates both sides alike, as it
    does a vector file's rows (``evalq.execute.dataset_scoring.score_dataset``)."""
    field = ".".join(map(str, key))
    both = f"this variant ({variant.name}) and the variant it borrows from ({lender.name})"
    if plan.model_path and lender_plan.model_path and plan.model_path != lender_plan.model_path:
        a, b = _family(plan.model_path), _family(lender_plan.model_path)
        if a != b:
            problems.add((*key[:-1], "model"),
                         f"{label}: {field} comes from '{lender.name}' ({_words(b)}), but "
                         f"{variant.name} encodes with {_words(a)}: the two sides would be "
                         "vectors of different spaces",
                         f"give {both} checkpoints of one model (same family and width), "
                         "or encode both sides with this variant")
    norm_a = (plan.settings or {}).get("normalize")
    norm_b = (lender_plan.settings or {}).get("normalize")
    if plan.settings and lender_plan.settings and norm_a != norm_b:
        problems.add((*key[:-1], "encoding", "normalize"),
                     f"{label}: {field} comes from '{lender.name}' with normalize={norm_b}, "
                     f"but {variant.name} encodes with normalize={norm_a}: inner products "
                     "would mix unit and raw lengths",
                     f"set the same encoding.normalize on {both}")


def _family(model_path: str) -> tuple[str | None, int | None]:
    """(model_type, output width) of a checkpoint, read from its files."""
    config = Path(model_path) / "config.json"
    kind = None
    if config.is_file():
        try:
            kind = json.loads(config.read_text(encoding="utf-8")).get("model_type")
        except (OSError, ValueError):
            kind = None
    return kind, embedding_dim(model_path)


def _words(family: tuple[str | None, int | None]) -> str:
    return f"a {family[0] or 'unknown'} model of width {family[1] or 'unknown'}"


def _in_a_database(stored: StoredVectors, key: tuple[Any, ...], label: str,
                   problems: Problems) -> bool:
    """Whether ``queries:`` names a pgvector table or a Qdrant shard (refused: queries
    are encoded online, never kept in an index, so there is nothing there to read)."""
    files = ([stored] if stored.datasets is None else list(stored.datasets.values()))
    if not any(f.pgvector is not None or f.qdrant is not None for f in files):
        return False
    problems.add(key, f"{label}: queries: names a database (pgvector / qdrant); query "
                 "vectors are not kept in an index, so a database source is for documents "
                 "only", "give the query vectors as a file, queries: {path: queries.npy, "
                 "ids: query-ids.txt} (or .parquet), or encode them (leave queries: out)")
    return True


def _check_files(stored: StoredVectors, recipe: Any, path: Path,
                 variant: tuple[Any, VariantPlan], key: tuple[Any, ...], label: str,
                 problems: Problems, limits: tuple[int | None, int | None]) -> None:
    """One file per dataset, each readable, 2-D float, ids matching rows, wide enough,
    of the variant's normalization, and covering the dataset's corpus (or queries, for
    ``key`` ending in ``queries``) as the run slices it."""
    side = str(key[-1])
    datasets = [d if isinstance(d, str) else str(d.get("name", d)) for d in recipe.datasets]
    if stored.datasets is None and len(datasets) > 1:
        problems.add(key, f"{label}: one vector file for {len(datasets)} datasets "
                     f"({', '.join(datasets)}); each dataset has its own {side}' vectors",
                     f"give one file per dataset: {side}: {{datasets: {{"
                     + ", ".join(f"{d}: {{path: ..., ids: ...}}" for d in datasets) + "}}")
        return
    if stored.datasets is not None:
        unknown = sorted(set(stored.datasets) - set(datasets))
        missing = [d for d in datasets if d not in stored.datasets]
        if unknown or missing:
            problems.add((*key, "datasets"),
                         f"{label}: {side}.datasets names "
                         + (f"unknown dataset(s) {', '.join(unknown)}" if unknown else "")
                         + ("; " if unknown and missing else "")
                         + (f"no file for {', '.join(missing)}" if missing else ""),
                         f"give exactly the recipe's datasets: {', '.join(datasets)}")
            return
    read: dict[str, set[str]] = {}
    for name in datasets:
        file = stored.file_for(name)
        assert file is not None
        fkey = key if stored.datasets is None else (*key, "datasets", name)
        ids = _check_one(file, stored.probe, path.parent, variant, (side, fkey), label,
                         problems)
        if ids is not None:
            read[name] = ids
    if read:
        _check_coverage(recipe, path, read, stored, key, label, problems, limits)


def _check_one(file: VectorFile, probe: ProbeOptions, base: Path,
               variant: tuple[Any, VariantPlan], at: tuple[str, tuple[Any, ...]],
               label: str, problems: Problems) -> set[str] | None:
    """One source's ids, when it is readable and its width and norms fit the variant
    (``at``: the side and the recipe field of the source)."""
    options, plan = variant
    side, key = at
    try:
        ids, width = read_header(file, base, side)
    except InputError as exc:
        _refused(exc, at, label, problems)
        return None
    model_dim = embedding_dim(plan.model_path) if plan.model_path else None
    widths = {model_dim, options.vectors.dims} - {None}
    if widths and width not in widths:
        problems.add(key, f"{label}: the {side}' vectors of {file.label()} are {width} wide, "
                     f"but {options.name}'s model ({plan.model_path}) makes {model_dim}-wide "
                     "vectors" + (f" (searched at vectors.dims {options.vectors.dims})"
                                  if options.vectors.dims else ""),
                     f"embed the {side} with this model, or point {side} at the vectors "
                     "that this model made")
        return None
    normalize = (plan.settings or {}).get("normalize")
    try:  # the sample reads the rows: a null or ragged parquet row is refused there
        norms = sample_norms(file, base, probe) if normalize and width == model_dim else None
    except InputError as exc:
        _refused(exc, at, label, problems)
        return None
    if norms is not None and len(norms) and float(np.max(np.abs(norms - 1.0))) > \
            probe.norm_tolerance:
        problems.add(key, f"{label}: the {side}' vectors of {file.label()} are not unit "
                     f"length (sampled norms {norms.min():.4g} to {norms.max():.4g}), but "
                     f"{options.name} encodes the other side with normalize=True: inner "
                     "products would mix unit and raw lengths",
                     f"save the {side}' vectors normalized (v / ||v||), or set "
                     f"encoding.normalize: false on {options.name} if the stored vectors "
                     "are raw")
        return None
    return ids


def _refused(exc: InputError, at: tuple[str, tuple[Any, ...]], label: str,
             problems: Problems) -> None:
    """A source's refusal under the recipe field of the source (``at``: the side and
    that field), down to the source's own field when the refusal names one."""
    side, key = at
    inner = (exc.field or "").split(".")  # <side>.<source>.<field>: name the field
    problems.add((*key, *inner[1:]) if inner[0] == side else key,
                 f"{label}: {exc.message}", exc.fix or "")


def _check_coverage(recipe: Any, path: Path, read: dict[str, set[str]],
                    stored: StoredVectors, key: tuple[Any, ...], label: str,
                    problems: Problems, limits: tuple[int | None, int | None]) -> None:
    """Every document (or query) of each dataset, as the run will slice it, has a row."""
    side = str(key[-1])
    try:
        loaded = load_datasets(list(recipe.datasets), path, *limits)
    except InputError:
        return  # the dataset's own problem: the run reports it where it loads
    for ds in loaded:
        ids = read.get(ds.name)
        if ids is None:
            continue
        wanted = list(ds.corpus.ids if side == "documents" else ds.queries.ids)
        lacking = [d for d in wanted if d not in ids]
        if lacking:
            file = stored.file_for(ds.name)
            problems.add(key, f"{label}: {file.label() if file else 'the vectors'} lacks "
                         f"{len(lacking)} of the {len(wanted)} {side} of dataset "
                         f"{ds.name}, e.g. {', '.join(lacking[:3])}",
                         f"embed all the dataset's {side} (ids as the dataset names them), "
                         f"or lower max_{'docs' if side == 'documents' else 'queries'} to "
                         f"the {side} the file holds")
