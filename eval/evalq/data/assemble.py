"""Checks shared by every file-based loader, and assembly into a :class:`Dataset`.

Loaders (BEIR folders, Hugging Face files) only parse: they turn rows into
:class:`TextRecord` values that remember where each row came from. Everything a user can
get wrong in the *content* is checked here once, the same way for every source:

* duplicate ids: an error naming both lines;
* empty texts: counted; an error unless ``allow_empty_texts`` (then kept and warned
  about, never dropped silently). A document is empty when both title and text are blank,
  since its encoded text is ``title + " " + text``;
* judgments naming unknown queries: those judgments are dropped with a warning (the query
  can never be run, so keeping it would score a 0 that measures nothing);
* judgments naming unknown documents: kept, with a warning. trec_eval and BEIR count them
  in recall and nDCG denominators, so keeping them is what makes our numbers comparable
  to theirs; metrics stay defined.
* queries without judgments in the split are not part of the evaluation set (BEIR's
  ``queries.jsonl`` holds every split's queries); their count is recorded in ``source``.

Warnings go through :mod:`warnings` (category :class:`DatasetWarning`) *and* into
``source["warnings"]``, so they reach the results manifest.
"""

from __future__ import annotations

import warnings
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from evalq.core.dataset import Corpus, Dataset, Qrels, Queries
from evalq.core.errors import InputError
from evalq.data.fingerprint import fingerprint


class DatasetWarning(UserWarning):
    """Something in the data is odd but measurable (unknown ids in qrels, empty texts)."""


class TextRecord(NamedTuple):
    """One parsed row and where it came from (``line`` is a 1-based line or row number)."""

    id: str
    title: str
    text: str
    file: str
    line: int


class FieldNames(NamedTuple):
    """Names of the id and text fields in the user's files, for error messages."""

    id: str
    text: str


BEIR_FIELDS = FieldNames("_id", "text")


@dataclass(frozen=True)
class AssemblyOptions:
    allow_empty_texts: bool = False
    keep_unjudged_queries: bool = False


def check_unique(records: Sequence[TextRecord], fields: FieldNames, what: str) -> None:
    first: dict[str, TextRecord] = {}
    for record in records:
        seen = first.get(record.id)
        if seen is not None:
            where = f"line {seen.line}" if seen.file == record.file else f"{seen.file}:{seen.line}"
            raise InputError(
                f"duplicate {what} id {record.id!r} (first seen on {where})",
                file=record.file,
                line=record.line,
                field=fields.id,
                fix=f"give every {what} a unique id",
            )
        first[record.id] = record


def check_empty(
    records: Sequence[TextRecord],
    fields: FieldNames,
    what: str,
    options: AssemblyOptions,
    notes: list[str],
    total: int | None = None,
) -> int:
    """Count empty texts among ``records`` (of ``total`` rows, when only some are
    passed); an error unless ``allow_empty_texts``."""
    empty = [r for r in records if not r.text.strip() and not r.title.strip()]
    if not empty:
        return 0
    first = empty[0]
    message = (
        f"{len(empty)} of {total if total is not None else len(records)} {what} texts are empty "
        f"(first: id {first.id!r})"
    )
    if not options.allow_empty_texts:
        raise InputError(
            message,
            file=first.file,
            line=first.line,
            field=fields.text,
            fix="fill in or remove those rows, or set `allow_empty_texts: true` in the dataset "
            "spec to keep them (they are encoded as empty strings)",
        )
    note = f"{message}; kept because allow_empty_texts is set"
    notes.append(note)
    warnings.warn(f"{first.file}: {note}", DatasetWarning, stacklevel=3)
    return len(empty)


class CheckedJudgments(NamedTuple):
    judgments: dict[str, dict[str, int]]
    unknown_queries: int
    unknown_documents: int


def check_judgments(qrels: Qrels, query_ids: Container[str], doc_ids: Container[str],
                    qrels_file: str | Path, notes: list[str]) -> CheckedJudgments:
    """Judgments restricted to known queries, with the module's warnings for unknown
    queries and documents; an error when no judged query is known. Shared by the loaded
    and the streamed corpus (which passes its id set, never its texts)."""
    judgments: dict[str, dict[str, int]] = {}
    unknown_queries: list[str] = []
    unknown_pairs = 0
    unknown_docs: set[str] = set()
    for qid, per_query in qrels.judgments.items():
        if qid not in query_ids:
            unknown_queries.append(qid)
            continue
        for docid in per_query:
            if docid not in doc_ids:
                unknown_pairs += 1
                unknown_docs.add(docid)
        judgments[qid] = dict(per_query)
    if unknown_queries:
        note = (
            f"{len(unknown_queries)} judged queries are not in the queries file "
            f"(e.g. {unknown_queries[0]!r}); their judgments are ignored"
        )
        notes.append(note)
        warnings.warn(f"{qrels_file}: {note}", DatasetWarning, stacklevel=3)
    if unknown_docs:
        note = (
            f"{unknown_pairs} judgments name {len(unknown_docs)} documents that are not in the "
            f"corpus (e.g. {sorted(unknown_docs)[0]!r}); kept, so recall counts them as "
            "unretrievable, as trec_eval does"
        )
        notes.append(note)
        warnings.warn(f"{qrels_file}: {note}", DatasetWarning, stacklevel=3)
    if not judgments:
        raise InputError(
            "no judged query is in the queries file",
            file=qrels_file,
            fix="check that the qrels and the queries use the same query ids (and the split)",
        )
    return CheckedJudgments(judgments, len(unknown_queries), len(unknown_docs))


class KeptQueries(NamedTuple):
    """The queries a dataset keeps, their judgments in query order, and how many queries
    had no judgment."""

    records: list[TextRecord]
    queries: Queries
    qrels: Qrels
    unjudged: int


def keep_queries(queries: Sequence[TextRecord], judged: CheckedJudgments,
                 options: AssemblyOptions) -> KeptQueries:
    """Judged queries only, unless ``keep_unjudged_queries`` (loaded and streamed alike)."""
    judgments = judged.judgments
    records = (list(queries) if options.keep_unjudged_queries
               else [r for r in queries if r.id in judgments])
    return KeptQueries(
        records,
        Queries(ids=tuple(r.id for r in records), texts=tuple(r.text for r in records)),
        Qrels(judgments={r.id: judgments[r.id] for r in records if r.id in judgments}),
        len(queries) - sum(1 for r in queries if r.id in judgments),
    )


def assembly_record(documents: int, kept: KeptQueries, judged: CheckedJudgments,
                    options: AssemblyOptions, empty_documents: int, empty_queries: int,
                    notes: list[str]) -> dict[str, Any]:
    """The counts and warnings a dataset's ``source`` records about its assembly."""
    return {
        "documents": documents,
        "queries": len(kept.queries),
        "judged_queries": len(kept.qrels.judgments),
        "queries_without_judgments": kept.unjudged if not options.keep_unjudged_queries else 0,
        "empty_documents": empty_documents,
        "empty_queries": empty_queries,
        "unknown_qrels_queries": judged.unknown_queries,
        "unknown_qrels_documents": judged.unknown_documents,
        "warnings": notes,
    }


def assemble_dataset(
    name: str,
    docs: Sequence[TextRecord],
    queries: Sequence[TextRecord],
    qrels: Qrels,
    *,
    corpus_file: str | Path,
    qrels_file: str | Path,
    source: Mapping[str, Any],
    options: AssemblyOptions,
    doc_fields: FieldNames = BEIR_FIELDS,
    query_fields: FieldNames = BEIR_FIELDS,
) -> Dataset:
    """Check parsed rows and judgments and build the :class:`Dataset` (module docstring)."""
    notes: list[str] = []
    if not docs:
        raise InputError("the corpus has no documents", file=corpus_file,
                         fix="point the dataset at a non-empty corpus")
    check_unique(docs, doc_fields, "document")
    check_unique(queries, query_fields, "query")

    judged = check_judgments(qrels, {r.id for r in queries}, {r.id for r in docs},
                             qrels_file, notes)
    kept = keep_queries(queries, judged, options)
    empty_docs = check_empty(docs, doc_fields, "document", options, notes)
    empty_queries = check_empty(kept.records, query_fields, "query", options, notes)

    corpus = Corpus(
        ids=tuple(r.id for r in docs),
        titles=tuple(r.title for r in docs),
        texts=tuple(r.text for r in docs),
    )
    query_values, ordered = kept.queries, kept.qrels
    full_source = dict(source)
    full_source.update(assembly_record(len(corpus), kept, judged, options, empty_docs,
                                       empty_queries, notes))
    return Dataset(
        name=name,
        corpus=corpus,
        queries=query_values,
        qrels=ordered,
        fingerprint=fingerprint(corpus, query_values, ordered),
        source=full_source,
    )


def record_id(value: Any, file: str | Path, line: int, field: str, fix: str) -> str:
    """One record's id as a string, refused where a TREC file could not hold it.

    Every reader (BEIR JSON Lines, Hugging Face tables) calls this, so an id with a space
    is refused while the data is read, not after encoding when the run file is written.
    Integers become strings; ``bool`` is an ``int`` subclass, and true/false as an id is
    certainly a mistake.
    """
    if isinstance(value, str) and value.strip():
        if any(c.isspace() for c in value):
            raise InputError(
                f"id {value!r} contains whitespace, which TREC run and qrels files cannot "
                "hold (their columns are whitespace-separated)",
                file=file, line=line, field=field,
                fix="replace spaces and tabs in ids, e.g. with '_', in the corpus, queries "
                "and qrels alike",
            )
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise InputError(
        f"id must be a non-empty string or an integer, got {value!r}",
        file=file, line=line, field=field, fix=fix,
    )


def record_text(value: Any, file: str | Path, line: int, field: str, fix: str) -> str:
    """One record's text or title: a missing or null value is an empty text."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    raise InputError(
        f"expected a string, got {type(value).__name__} {value!r:.60}",
        file=file, line=line, field=field, fix=fix,
    )
