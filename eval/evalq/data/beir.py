"""BEIR folders: ``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``.

The layout is BEIR's (``_id``, ``title``, ``text`` per corpus line; ``_id``, ``text`` per
query line; tab-separated qrels with the header ``query-id corpus-id score``). Qrels in
TREC form under the same name are accepted too (:func:`evalq.data.trec.read_qrels`
detects the shape). Ids become strings even when the JSON holds numbers, so ``"0001"`` and
``1`` are never confused. Content checks (duplicates, empty texts, unknown ids) are the
shared ones of :mod:`evalq.data.assemble`.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evalq.core.dataset import Dataset
from evalq.core.errors import InputError
from evalq.data import assemble
from evalq.data.assemble import AssemblyOptions, FieldNames, TextRecord, assemble_dataset
from evalq.data.trec import iter_json_lines, read_qrels

CORPUS_FILE = "corpus.jsonl"
QUERIES_FILE = "queries.jsonl"
_TEXT_FIX = "write texts as JSON strings"



def read_jsonl_records(
    path: Path, *, id_field: str, text_field: str, title_field: str | None
) -> list[TextRecord]:
    """Parse one JSON object per line into :class:`TextRecord` values (a list)."""
    return list(iter_jsonl_records(path, id_field=id_field, text_field=text_field,
                                   title_field=title_field))


def iter_jsonl_records(
    path: Path, *, id_field: str, text_field: str, title_field: str | None
) -> Iterator[TextRecord]:
    """Parse one JSON object per line, one at a time: the loaders list them, a streamed
    corpus (:mod:`evalq.data.streamed`) reads them block by block, and both see the
    same records.

    Blank lines are skipped; anything else that is not a JSON object with the id and text
    fields is an error naming the line. A missing or null title is an empty title.
    """
    for number, row in iter_json_lines(path):
        if not isinstance(row, dict):
            raise InputError(
                f"expected a JSON object, got {type(row).__name__}",
                file=path,
                line=number,
                fix="write exactly one JSON object per line (JSON Lines)",
            )
        yield row_record(row, path, number, id_field=id_field, text_field=text_field,
                         title_field=title_field)


def row_record(row: dict[str, Any], path: Path, number: int, *, id_field: str,
               text_field: str, title_field: str | None) -> TextRecord:
    """One row (a JSON line, a parquet or Arrow row) as a :class:`TextRecord`, with the
    checks every format shares: both fields present, ids non-empty strings or integers
    without whitespace, texts strings (a missing or null title is an empty title)."""
    for required in (id_field, text_field):
        if required not in row:
            raise InputError(
                f"missing field (the row has {sorted(row)})",
                file=path,
                line=number,
                field=required,
                fix=f"every row needs '{id_field}' and '{text_field}'",
            )
    title = ""
    if title_field is not None:
        title = assemble.record_text(row.get(title_field), path, number, title_field, _TEXT_FIX)
    return TextRecord(
        id=assemble.record_id(row[id_field], path, number, id_field,
                     f"give every line a string '{id_field}'"),
        title=title,
        text=assemble.record_text(row[text_field], path, number, text_field, _TEXT_FIX),
        file=str(path),
        line=number,
    )


def check_layout(folder: Path, split: str) -> tuple[Path, Path, Path]:
    if not folder.is_dir():
        raise InputError(
            "BEIR dataset folder not found" if not folder.exists() else "not a folder",
            file=folder,
            fix=f"point to a folder holding {CORPUS_FILE}, {QUERIES_FILE} and qrels/<split>.tsv",
        )
    corpus, queries = folder / CORPUS_FILE, folder / QUERIES_FILE
    qrels = folder / "qrels" / f"{split}.tsv"
    folders = [p for p in (corpus, queries, qrels) if p.is_dir()]
    if folders:
        raise InputError(
            f"{', '.join(str(p.relative_to(folder)) for p in folders)} is a folder, not a file "
            f"(a BEIR folder holds the files {CORPUS_FILE}, {QUERIES_FILE} and "
            f"qrels/{split}.tsv)", file=folder,
            fix="put the file itself there (unpack the dataset again if it came nested)")
    missing = [p for p in (corpus, queries, qrels) if not p.is_file()]
    if missing:
        splits = sorted(p.stem for p in (folder / "qrels").glob("*.tsv"))
        available = f"; qrels splits present: {', '.join(splits)}" if splits else ""
        raise InputError(
            f"missing {', '.join(str(p.relative_to(folder)) for p in missing)} "
            f"(a BEIR folder holds {CORPUS_FILE}, {QUERIES_FILE} and qrels/{split}.tsv){available}",
            file=folder,
            field="split" if missing == [qrels] and splits else None,
            fix="download/unpack the complete BEIR dataset, or choose a split that exists",
        )
    return corpus, queries, qrels


def load_beir(
    folder: str | Path,
    *,
    split: str = "test",
    name: str | None = None,
    use_titles: bool = True,
    allow_empty_texts: bool = False,
    keep_unjudged_queries: bool = False,
) -> Dataset:
    """Load a BEIR folder; ``use_titles=False`` leaves titles empty (body-only encoding)."""
    folder = Path(folder)
    corpus_path, queries_path, qrels_path = check_layout(folder, split)
    docs = read_jsonl_records(
        corpus_path, id_field="_id", text_field="text", title_field="title" if use_titles else None
    )
    queries = read_jsonl_records(queries_path, id_field="_id", text_field="text", title_field=None)
    qrels = read_qrels(qrels_path)
    return assemble_dataset(
        name or folder.name,
        docs,
        queries,
        qrels,
        corpus_file=corpus_path,
        qrels_file=qrels_path,
        source={
            "source": "beir",
            "path": str(folder),
            "split": split,
            "use_titles": use_titles,
        },
        options=AssemblyOptions(
            allow_empty_texts=allow_empty_texts, keep_unjudged_queries=keep_unjudged_queries
        ),
        doc_fields=FieldNames("_id", "text"),
        query_fields=FieldNames("_id", "text"),
    )
