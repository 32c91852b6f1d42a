"""Hugging Face ``datasets``: local files and folders, and hub datasets already cached.

A spec names three parts (corpus, queries, qrels), each either local ``files`` (jsonl,
json, parquet, csv, tsv; globs allowed, relative to the manifest's folder) or a ``name``
(a local dataset folder, or a hub dataset such as ``BeIR/scifact`` with ``config`` and
``split``), plus the column names. evalq never lets ``datasets`` reach the network: hub
names resolve only from the local cache, and a miss is an :class:`InputError` that says so
and how to fill the cache.

CSV/TSV columns are read as strings (``"0001"`` must not become ``1``); ids that arrive as
integers (JSON, parquet) become strings. Content checks are the shared ones of
:mod:`evalq.data.assemble`; a row's number stands in for a line number in errors.
"""

from __future__ import annotations

import glob
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, model_validator

from evalq.core.dataset import Dataset, Qrels
from evalq.core.errors import InputError, MissingExtraError
from evalq.data.assemble import (
    AssemblyOptions,
    FieldNames,
    TextRecord,
    assemble_dataset,
    record_id,
    record_text,
)
from evalq.data.trec import iter_json_lines, iter_text_lines

FileFormat = Literal["json", "parquet", "csv", "tsv"]
_EXTENSIONS: dict[str, FileFormat] = {
    ".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".tsv": "tsv",
}
_ID_FIX = "give every row an id without spaces"
_TEXT_FIX = "store texts as strings"
CACHE_FIX = (
    "on a machine with network access run `datasets.load_dataset(...)` with the same name, "
    "config, split and revision to fill the Hugging Face cache (HF_HOME), copy that cache "
    "here, or download the files and name them under `files:`"
)


class HFPart(BaseModel):
    """Where one table (corpus, queries or qrels) comes from."""

    model_config = ConfigDict(extra="forbid")

    files: str | list[str] | None = None
    format: FileFormat | None = None
    name: str | None = None
    config: str | None = None
    split: str = "train"
    revision: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> HFPart:
        if (self.files is None) == (self.name is None):
            raise ValueError("give exactly one of `files` (local files) or `name` (dataset)")
        return self

    def describe(self) -> str:
        if self.files is not None:
            files = [self.files] if isinstance(self.files, str) else self.files
            return ", ".join(files)
        return f"{self.name} (config={self.config}, split={self.split})"


class Columns(BaseModel):
    """Column names; ``title: null`` means documents have no title."""

    model_config = ConfigDict(extra="forbid")

    doc_id: str = "_id"
    title: str | None = "title"
    text: str = "text"
    query_id: str = "_id"
    query_text: str = "text"
    qrels_query_id: str = "query-id"
    qrels_doc_id: str = "corpus-id"
    qrels_score: str = "score"


class HFSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    corpus: HFPart
    queries: HFPart
    qrels: HFPart
    columns: Columns = Columns()


def _import_datasets() -> Any:
    # Offline before the first import: `datasets` reads these variables once, at import.
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import datasets
    except ImportError:
        raise MissingExtraError("datasets", "cpu", "Loading Hugging Face datasets") from None
    # Imported earlier by someone else without the variables: still never go online.
    datasets.config.HF_HUB_OFFLINE = True
    datasets.config.HF_DATASETS_OFFLINE = True
    datasets.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    return datasets


def _resolve_files(part: HFPart, base_dir: Path, what: str) -> list[str]:
    patterns = [part.files] if isinstance(part.files, str) else list(part.files or [])
    found: list[str] = []
    for pattern in patterns:
        full = pattern if Path(pattern).is_absolute() else str(base_dir / pattern)
        matches = sorted(glob.glob(full))
        if not matches:
            raise InputError(
                f"no file matches {pattern!r} (looked in {base_dir})",
                file=full,
                field=f"{what}.files",
                fix="check the path; relative paths are resolved from the manifest's folder",
            )
        found.extend(matches)
    return found


def _file_format(part: HFPart, files: list[str], what: str) -> FileFormat:
    if part.format is not None:
        return part.format
    formats = {_EXTENSIONS.get(Path(f).suffix.lower()) for f in files}
    if len(formats) != 1 or None in formats:
        raise InputError(
            f"cannot tell the file format from the names {files}",
            field=f"{what}.format",
            fix="set `format:` to one of json, parquet, csv, tsv",
        )
    return formats.pop()


class Table(NamedTuple):
    """Columns of one part, and for file-read rows where each row came from."""

    columns: dict[str, list[Any]]
    where: list[tuple[str, int]] | None = None

    def locate(self, row: int, default: str) -> tuple[str, int]:
        """``(file, line)`` of 1-based ``row``: the real line when known, else the row."""
        return self.where[row - 1] if self.where else (default, row)


def load_table(
    part: HFPart, base_dir: Path, what: str, string_columns: Sequence[str]
) -> Table:
    """Load one part as ``{column: values}``."""
    datasets = _import_datasets()
    if part.files is not None:
        files = _resolve_files(part, base_dir, what)
        fmt = _file_format(part, files, what)
        kwargs: dict[str, Any] = {}
        if fmt in ("csv", "tsv"):
            kwargs.update(
                sep="\t" if fmt == "tsv" else ",",
                converters={c: str for c in string_columns},
                na_filter=False,
            )
        if fmt == "json":
            return _read_json_files([Path(f) for f in files])
        builder = "csv" if fmt == "tsv" else fmt
        try:
            table = datasets.load_dataset(builder, data_files=files, split="train", **kwargs)
        except Exception as exc:  # the library raises many types for a bad file
            raise InputError(
                f"could not read {fmt} data: {type(exc).__name__}: {exc}",
                file=files[0] if len(files) == 1 else ", ".join(files),
                field=f"{what}.files",
                fix=f"check that the files are valid {fmt}",
            ) from None
    else:
        assert part.name is not None
        local = Path(part.name) if Path(part.name).is_absolute() else base_dir / part.name
        target = str(local) if local.exists() else part.name
        try:
            table = datasets.load_dataset(
                target, part.config, split=part.split, revision=part.revision
            )
        except Exception as exc:
            if local.exists():
                raise InputError(
                    f"could not load the local dataset: {type(exc).__name__}: {exc}",
                    file=local,
                    field=f"{what}.name",
                    fix="check the folder's files, the config and the split",
                ) from None
            raise InputError(
                f"hub dataset {part.name!r} (config {part.config!r}, split {part.split!r}, "
                f"revision {part.revision!r}) is not in the local Hugging Face cache and "
                f"evalq does not download ({type(exc).__name__}: {str(exc)[:200]})",
                field=f"{what}.name",
                fix=CACHE_FIX,
            ) from None
    return Table({name: table.data.column(name).to_pylist() for name in table.column_names})


def _read_json_files(files: list[Path]) -> Table:
    """JSON Lines (or a JSON array of objects) read with the standard library.

    Not through ``datasets``: its Arrow type inference turns a column that mixes numbers
    and strings (ids ``7`` and ``"d1"``) into JSON-encoded text (``'"d1"'``), silently
    changing ids. Reading here also gives exact file:line positions in errors.
    """
    columns: dict[str, list[Any]] = {}
    where: list[tuple[str, int]] = []

    def add(row: Any, file: Path, line: int) -> None:
        if not isinstance(row, dict):
            raise InputError(f"expected a JSON object, got {type(row).__name__}",
                             file=file, line=line, fix="store one JSON object per row")
        for key in row:
            columns.setdefault(key, [None] * len(where))
        for key, values in columns.items():
            values.append(row.get(key))
        where.append((str(file), line))

    for file in files:
        lines = list(iter_text_lines(file))
        first = next((t for _n, t in lines if t.strip()), "")
        if first.lstrip().startswith("["):
            try:
                rows = json.loads("\n".join(t for _n, t in lines))
            except json.JSONDecodeError as exc:
                raise InputError(f"malformed JSON: {exc.msg}", file=file, line=exc.lineno,
                                 fix="write a JSON array of objects, or JSON Lines") from None
            if not isinstance(rows, list):
                raise InputError("expected a JSON array of objects", file=file, line=1,
                                 fix="write a JSON array of objects, or JSON Lines")
            for index, row in enumerate(rows, start=1):
                add(row, file, index)
            continue
        for number, row in iter_json_lines(file, lines):
            add(row, file, number)
    return Table(columns, where)


def _column(table: Table, column: str, part: HFPart, what: str, config_field: str) -> list[Any]:
    if column not in table.columns:
        raise InputError(
            f"column {column!r} not found; the data has {sorted(table.columns)}",
            file=part.describe(),
            field=f"columns.{config_field}",
            fix=f"set `columns.{config_field}` to the {what} column that holds it",
        )
    return table.columns[column]


def _as_relevance(value: Any, where: str, line: int, column: str) -> int:
    if isinstance(value, bool) or value is None:
        number = math.nan
    elif isinstance(value, int):
        return value
    else:
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
    if math.isfinite(number) and number == int(number):
        return int(number)
    raise InputError(
        f"relevance {value!r} is not an integer",
        file=where, line=line, field=column,
        fix="use integer relevance levels (0 = not relevant, 1, 2, ... graded)",
    )


def _records(
    table: Table, part: HFPart, what: str,
    id_col: tuple[str, str], text_col: tuple[str, str], title_col: tuple[str, str] | None,
) -> list[TextRecord]:
    ids = _column(table, id_col[0], part, what, id_col[1])
    texts = _column(table, text_col[0], part, what, text_col[1])
    titles = _column(table, title_col[0], part, what, title_col[1]) if title_col else None
    records: list[TextRecord] = []
    for row in range(1, len(ids) + 1):
        file, line = table.locate(row, part.describe())
        records.append(
            TextRecord(
                id=record_id(ids[row - 1], file, line, id_col[0], _ID_FIX),
                title=record_text(titles[row - 1], file, line, title_col[0], _TEXT_FIX)
                if titles is not None and title_col is not None
                else "",
                text=record_text(texts[row - 1], file, line, text_col[0], _TEXT_FIX),
                file=file,
                line=line,
            )
        )
    return records


def _qrels(table: Table, part: HFPart, columns: Columns) -> Qrels:
    qids = _column(table, columns.qrels_query_id, part, "qrels", "qrels_query_id")
    docids = _column(table, columns.qrels_doc_id, part, "qrels", "qrels_doc_id")
    scores = _column(table, columns.qrels_score, part, "qrels", "qrels_score")
    judgments: dict[str, dict[str, int]] = {}
    for row in range(1, len(qids) + 1):
        file, line = table.locate(row, part.describe())
        qid = record_id(qids[row - 1], file, line, columns.qrels_query_id, _ID_FIX)
        docid = record_id(docids[row - 1], file, line, columns.qrels_doc_id, _ID_FIX)
        rel = _as_relevance(scores[row - 1], file, line, columns.qrels_score)
        per_query = judgments.setdefault(qid, {})
        if docid in per_query and per_query[docid] != rel:
            raise InputError(
                f"query {qid!r} judges document {docid!r} twice with different "
                f"levels ({per_query[docid]} and {rel})",
                file=file, line=line, field=columns.qrels_score,
                fix="keep one judgment per (query, document) pair",
            )
        per_query[docid] = rel
    if not judgments:
        raise InputError("the qrels table is empty", file=part.describe(), field="qrels",
                         fix="point `qrels` at a table with at least one judgment")
    return Qrels(judgments=judgments)


def load_hf(
    spec: HFSpec,
    *,
    base_dir: str | Path = ".",
    name: str = "hf",
    allow_empty_texts: bool = False,
    keep_unjudged_queries: bool = False,
) -> Dataset:
    """Load corpus, queries and qrels as the spec says (see the module docstring)."""
    base = Path(base_dir)
    c = spec.columns
    corpus_table = load_table(
        spec.corpus, base, "corpus", [c.doc_id, c.text] + ([c.title] if c.title else [])
    )
    # The default title column is optional (many corpora have none); one named explicitly
    # must exist.
    title = c.title
    if (
        title is not None
        and title not in corpus_table.columns
        and "title" not in c.model_fields_set
    ):
        title = None
    docs = _records(
        corpus_table, spec.corpus, "corpus", (c.doc_id, "doc_id"), (c.text, "text"),
        (title, "title") if title else None,
    )
    queries_table = load_table(spec.queries, base, "queries", [c.query_id, c.query_text])
    queries = _records(
        queries_table, spec.queries, "queries", (c.query_id, "query_id"),
        (c.query_text, "query_text"), None,
    )
    qrels_table = load_table(spec.qrels, base, "qrels", [c.qrels_query_id, c.qrels_doc_id])
    qrels = _qrels(qrels_table, spec.qrels, c)
    return assemble_dataset(
        name,
        docs,
        queries,
        qrels,
        corpus_file=spec.corpus.describe(),
        qrels_file=spec.qrels.describe(),
        source={
            "source": "hf",
            "base_dir": str(base),
            "spec": spec.model_dump(mode="json"),
            "titles": title is not None,
        },
        options=AssemblyOptions(
            allow_empty_texts=allow_empty_texts, keep_unjudged_queries=keep_unjudged_queries
        ),
        doc_fields=FieldNames(c.doc_id, c.text),
        query_fields=FieldNames(c.query_id, c.query_text),
    )
