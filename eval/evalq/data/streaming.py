"""Streaming corpora: read, encode and store a corpus block by block, never all at once.

The dataset loaders build a :class:`~evalq.core.dataset.Corpus` (every text in a
tuple), which is right for evaluation sets and wrong for an 8.8M-passage corpus. Here a
corpus file is read in blocks of ``block_rows`` rows — jsonl line by line, parquet by
row groups (``pyarrow.parquet.ParquetFile.iter_batches``), a Hugging Face ``datasets``
Arrow file or ``save_to_disk`` folder memory-mapped by Arrow — each block is encoded
(through the embedding cache, so a rerun or a crash resumes per block) and appended to
sharded ``.npy`` files (:mod:`evalq.data.vectors`). What stays in memory is the ids (the
run file needs them), one block of texts and one shard of vectors.

Freed is not returned: glibc keeps the heap pages of a finished block (tokenizer output,
activations, the block's vectors) as free lists, and their high-water mark drifts up with
the number of blocks — measured on MiniLM, 500-text blocks left 705-720 MiB resident
where 633 MiB was live. :func:`return_freed_memory` (``malloc_trim``) after each block
hands them back, so peak RSS is one block's working set whatever the corpus size.

Field names follow BEIR (``_id``, ``title``, ``text``) unless told otherwise; texts are
encoded as ``title + separator + text`` like :meth:`Corpus.texts_for_encoding`.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalq.core.dataset import encoding_text
from evalq.core.errors import InputError
from evalq.data.assemble import TextRecord
from evalq.data.beir import iter_jsonl_records, row_record


@dataclass(frozen=True)
class TextBlock:
    ids: list[str]
    texts: list[str]


def iter_records(
    path: str | Path, *, id_field: str = "_id", text_field: str = "text",
    title_field: str | None = "title", block_rows: int = 10_000,
) -> Iterator[TextRecord]:
    """Every row of a jsonl, parquet or Arrow corpus as a checked :class:`TextRecord`,
    one at a time (``block_rows`` is the read size of parquet and Arrow batches). jsonl
    rows are parsed exactly as the dataset loaders parse them."""
    path = Path(path)
    if block_rows < 1:
        raise ValueError("block_rows must be at least 1")
    if not path.exists():
        raise InputError(message="corpus file not found", file=path,
                         fix="point the dataset at an existing corpus file")
    if path.suffix in (".jsonl", ".json") and not path.is_dir():
        yield from iter_jsonl_records(path, id_field=id_field, text_field=text_field,
                                      title_field=title_field)
        return
    if path.is_dir() or path.suffix == ".arrow":
        rows = _arrow_rows(path, block_rows)
    elif path.suffix == ".parquet":
        rows = _parquet_rows(path, block_rows, [id_field, text_field, title_field])
    else:
        raise InputError(message=f"cannot stream a corpus from '{path.suffix}' files",
                         file=path, fix="use .jsonl, .parquet, an .arrow file or a "
                                        "datasets save_to_disk folder")
    for number, row in rows:
        yield row_record(row, path, number, id_field=id_field, text_field=text_field,
                         title_field=title_field)


def iter_blocks(
    path: str | Path, *, block_rows: int = 10_000, id_field: str = "_id",
    text_field: str = "text", title_field: str | None = "title",
    title_separator: str | None = " ",
) -> Iterator[TextBlock]:
    """Blocks of (ids, texts to encode) from a jsonl, parquet or Arrow corpus."""
    yield from blocks_of(iter_records(path, id_field=id_field, text_field=text_field,
                                      title_field=title_field, block_rows=block_rows),
                         block_rows, title_separator)


def blocks_of(records: Iterator[TextRecord], block_rows: int,
              title_separator: str | None) -> Iterator[TextBlock]:
    """Cut records into blocks of ``block_rows`` (ids, texts to encode)."""
    ids: list[str] = []
    texts: list[str] = []
    for record in records:
        ids.append(record.id)
        texts.append(encoding_text(record.title, record.text, title_separator))
        if len(ids) == block_rows:
            yield TextBlock(ids, texts)
            ids, texts = [], []
    if ids:
        yield TextBlock(ids, texts)


def return_freed_memory() -> bool:
    """Give the C heap's free pages back to the system (glibc ``malloc_trim(0)``).

    ``False`` where there is no glibc (musl, macOS): there the allocator's own policy
    decides, and the streaming path is still correct, only its RSS less flat."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


@functools.cache
def _malloc_trim() -> Any:
    """glibc's ``malloc_trim``, looked up once; ``None`` where there is no such symbol."""
    name = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    except OSError:
        return None


def _parquet_rows(path: Path, block_rows: int,
                  fields: list[str | None]) -> Iterator[tuple[int, dict[str, Any]]]:
    import pyarrow
    import pyarrow.parquet as pq

    try:
        handle = pq.ParquetFile(path)
    except (pyarrow.ArrowInvalid, OSError) as exc:
        raise _unreadable(path, "parquet", exc) from None
    columns = [f for f in fields if f and f in handle.schema_arrow.names]
    n = 0
    for batch in handle.iter_batches(batch_size=block_rows, columns=columns):
        for row in batch.to_pylist():
            n += 1
            yield n, row


def _arrow_rows(path: Path, block_rows: int) -> Iterator[tuple[int, dict[str, Any]]]:
    import datasets
    import pyarrow

    try:
        data = (datasets.load_from_disk(str(path)) if path.is_dir()
                else datasets.Dataset.from_file(str(path)))  # memory-mapped, not loaded
    except (pyarrow.ArrowInvalid, OSError, ValueError) as exc:
        raise _unreadable(path, "Arrow (datasets)", exc) from None
    n = 0
    for batch in data.iter(batch_size=block_rows):
        keys = list(batch)
        for values in zip(*(batch[k] for k in keys)):
            n += 1
            yield n, dict(zip(keys, values))


def _unreadable(path: Path, kind: str, exc: Exception) -> InputError:
    """A corpus file that its suffix says is ``kind`` but that does not open as one."""
    return InputError(message=f"cannot read the corpus as {kind}: {exc}", file=path,
                      fix=f"check that the file is a complete {kind} file, or give it the "
                          "suffix of its real format (.jsonl, .parquet, .arrow)")
