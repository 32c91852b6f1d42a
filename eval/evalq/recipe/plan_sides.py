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
from evalq.data.vectorfiles import read_ids, read_parquet
from evalq.engines.modelinfo import embedding_dim
from evalq.plan.sides import REFERENCE, SidePlan, StoredVectors, VectorFile
from evalq.plan.types import VariantPlan
from evalq.recipe.plan_variants import Problems
from evalq.retrieve.stored_vectors import pgvector_header, qdrant_header


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
                _check_files(value, recipe, path, variant, by_name[variant.name],
                             (*vpath, side), label, problems, limits)
                sides = replace(sides, documents_file=value)
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
    """Width (Matryoshka dims), model family and normalization agree on both sides."""
    field = ".".join(map(str, key))
    both = f"this variant ({variant.name}) and the variant it borrows from ({lender.name})"
    mine, theirs = variant.vectors.dims, lender.vectors.dims
    if mine != theirs:
        problems.add((*key[:-1], "vectors", "dims"),
                     f"{label}: {field} comes from '{lender.name}' at "
                     f"{theirs or 'the model width'} dimensions, but {variant.name} "
                     f"searches at {mine or 'the model width'} (vectors.dims)",
                     f"give {both} the same vectors.dims")
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


def _check_files(stored: StoredVectors, recipe: Any, path: Path, variant: Any,
                 plan: VariantPlan, key: tuple[Any, ...], label: str, problems: Problems,
                 limits: tuple[int | None, int | None]) -> None:
    """One file per dataset, each readable, 2-D float, ids matching rows, wide enough,
    and covering the dataset's corpus as the run slices it."""
    datasets = [d if isinstance(d, str) else str(d.get("name", d)) for d in recipe.datasets]
    if stored.datasets is None and len(datasets) > 1:
        problems.add(key, f"{label}: one vector file for {len(datasets)} datasets "
                     f"({', '.join(datasets)}); each dataset's corpus has its own vectors",
                     "give one file per dataset: documents: {datasets: {"
                     + ", ".join(f"{d}: {{path: ..., ids: ...}}" for d in datasets) + "}}")
        return
    if stored.datasets is not None:
        unknown = sorted(set(stored.datasets) - set(datasets))
        missing = [d for d in datasets if d not in stored.datasets]
        if unknown or missing:
            problems.add((*key, "datasets"),
                         f"{label}: documents.datasets names "
                         + (f"unknown dataset(s) {', '.join(unknown)}" if unknown else "")
                         + ("; " if unknown and missing else "")
                         + (f"no file for {', '.join(missing)}" if missing else ""),
                         f"give exactly the recipe's datasets: {', '.join(datasets)}")
            return
    model_dim = embedding_dim(plan.model_path) if plan.model_path else None
    widths = {model_dim, variant.vectors.dims} - {None}
    read: dict[str, set[str]] = {}
    for name in datasets:
        file = stored.file_for(name)
        assert file is not None
        fkey = key if stored.datasets is None else (*key, "datasets", name)
        try:
            ids, width = read_header(file, path.parent)
        except InputError as exc:
            problems.add(fkey, f"{label}: {exc.message}", exc.fix or "")
            continue
        if widths and width not in widths:
            problems.add(fkey, f"{label}: the vectors of {file.label()} are {width} wide, but "
                         f"{variant.name}'s model ({plan.model_path}) makes {model_dim}-wide "
                         "vectors" + (f" (searched at vectors.dims {variant.vectors.dims})"
                                      if variant.vectors.dims else ""),
                         "embed the corpus with this model, or point documents at the "
                         "vectors that this model made")
            continue
        read[name] = ids
    if read:
        _check_coverage(recipe, path, read, stored, key, label, problems, limits)


def resolve_file(name: str, base: Path) -> Path:
    """A recipe's file path, relative to the recipe's folder."""
    candidate = Path(name).expanduser()
    return candidate if candidate.is_absolute() else base / candidate


def read_header(file: VectorFile, base: Path) -> tuple[set[str], int]:
    """The file's ids and vector width, reading the ``.npy`` header only (memory-mapped)
    or the parquet columns; an :class:`InputError` with the fix for what is wrong."""
    if file.pgvector is not None:
        db = file.pgvector
        ids_list, width = pgvector_header(db.dsn, db.table, db.id_column,
                                                         db.vector_column, "documents")
        return _unique(ids_list, file.label()), width
    if file.qdrant is not None:
        ids_list, width = qdrant_header(
            qdrant_folder(file.qdrant.path, file.qdrant.collection, base),
            file.qdrant.id_payload, "documents")
        return _unique(ids_list, file.label()), width
    assert file.path is not None
    where = resolve_file(file.path, base)
    if not where.is_file():
        raise InputError(message=f"vector file {where} does not exist",
                         fix="fix documents.path (relative paths are read from the recipe's "
                         "folder)")
    if where.suffix == ".parquet":
        ids_list, width = _parquet_header(where, file)
    elif where.suffix == ".npy":
        ids_list, width = _npy_header(where, file, base)
    else:
        raise InputError(message=f"vector file {where} is neither .npy nor .parquet",
                         fix="save the vectors with numpy.save (with an ids file) or as "
                         "parquet with an id and a vector column")
    return _unique(ids_list, str(where)), width


def qdrant_folder(path: str, collection: str | None, base: Path) -> Path:
    """A Qdrant source's shard folder: ``path`` (from the recipe's folder) / ``collection``."""
    folder = resolve_file(path, base)
    return folder / collection if collection else folder


def _unique(ids_list: list[str], source: str) -> set[str]:
    ids = set(ids_list)
    if len(ids) != len(ids_list):
        dupes = sorted({i for i in ids_list if ids_list.count(i) > 1})[:5] \
            if len(ids_list) < 100_000 else ["(several)"]
        raise InputError(message=f"the ids of {source} repeat: {', '.join(dupes)}",
                         fix="give each document one row (one id per line, unique)")
    return ids


def _npy_header(where: Path, file: VectorFile, base: Path) -> tuple[list[str], int]:
    if file.ids is None:
        raise InputError(message=f"vector file {where} has no ids file",
                         fix="add ids: <file with one document id per line, in row order>")
    try:
        array = np.load(where, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(message=f"vector file {where} is not a readable .npy array ({exc})",
                         fix="save it with numpy.save(path, vectors.astype('float32'))") \
            from None
    if array.ndim != 2 or array.dtype.kind != "f":
        raise InputError(message=f"vector file {where} holds a {array.ndim}-D "
                         f"{array.dtype} array; a (documents, dim) float matrix is needed",
                         fix="save the vectors as a 2-D float32 array")
    ids_path = resolve_file(file.ids, base)
    if not ids_path.is_file():
        raise InputError(message=f"ids file {ids_path} does not exist",
                         fix="fix documents.ids (one document id per line, in row order)")
    ids = read_ids(ids_path)
    if len(ids) != array.shape[0]:
        raise InputError(message=f"vector file {where} has {array.shape[0]} rows but "
                         f"{ids_path} has {len(ids)} ids",
                         fix="write one id per row, in the file's row order")
    return ids, int(array.shape[1])


def _parquet_header(where: Path, file: VectorFile) -> tuple[list[str], int]:
    table = read_parquet(where)
    for column in (file.id_column, file.vector_column):
        if column not in table.column_names:
            raise InputError(message=f"vector file {where} has no column '{column}' "
                             f"(it has {', '.join(table.column_names)})",
                             fix="set documents.id_column / vector_column")
    ids = [str(i) for i in table.column(file.id_column).to_pylist()]
    first = table.column(file.vector_column).slice(0, 1).to_pylist()
    if not first or not isinstance(first[0], list) or not all(
            isinstance(x, float) for x in first[0]):
        raise InputError(message=f"column '{file.vector_column}' of {where} does not hold "
                         "lists of floats", fix="store one float list per row")
    return ids, len(first[0])


def _check_coverage(recipe: Any, path: Path, read: dict[str, set[str]],
                    stored: StoredVectors, key: tuple[Any, ...], label: str,
                    problems: Problems, limits: tuple[int | None, int | None]) -> None:
    """Every document of each dataset, as the run will slice it, has a row."""
    try:
        loaded = load_datasets(list(recipe.datasets), path, *limits)
    except InputError:
        return  # the dataset's own problem: the run reports it where it loads
    for ds in loaded:
        ids = read.get(ds.name)
        if ids is None:
            continue
        lacking = [d for d in ds.corpus.ids if d not in ids]
        if lacking:
            file = stored.file_for(ds.name)
            problems.add(key, f"{label}: {file.label() if file else 'the vectors'} lacks "
                         f"{len(lacking)} of the {len(ds.corpus)} documents of dataset "
                         f"{ds.name}, e.g. {', '.join(lacking[:3])}",
                         "embed the whole corpus (ids as the dataset names them), or lower "
                         "max_docs to the documents the file holds")
