"""A dataset whose corpus stays on disk: ``stream:`` in a dataset spec.

The loaders build a :class:`~evalq.core.dataset.Corpus` holding every text, which is
right for evaluation sets and wrong for an 8.8M-passage corpus. A streamed dataset keeps
the queries and judgments in memory (they are small) and, of the corpus, only its ids
(run files and judgments need them); texts are read again, block by block, whenever
something needs them: each variant's encoding, the fingerprint, the stored snippets.

It is the same dataset as the loaded one, checked the same way:

* the same rows (jsonl parsed by :func:`evalq.data.beir.iter_jsonl_records`; parquet
  and Arrow rows through the same :func:`~evalq.data.beir.row_record` checks), the same
  duplicate-id, empty-text and judgment checks (:mod:`evalq.data.assemble`);
* the same fingerprint, fed one field per pass (:class:`DatasetDigest`), so a manifest's
  fingerprint verifies either way;
* the same slice for ``max_queries`` / ``max_docs`` (:mod:`evalq.data.slicing`
  chooses rows from ids alone).

Reading a corpus several times costs little next to encoding it, and a file that changes
between two reads is caught: every pass checks the ids it reads against the first.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evalq.core.dataset import Dataset, Qrels, Queries, encoding_text
from evalq.core.errors import InputError
from evalq.data.assemble import (
    BEIR_FIELDS,
    AssemblyOptions,
    TextRecord,
    assembly_record,
    check_empty,
    check_judgments,
    check_unique,
    keep_queries,
)
from evalq.data.fingerprint import DatasetDigest
from evalq.data.slicing import check_limit, choose_documents, restrict_judgments, slice_record
from evalq.data.streaming import TextBlock, blocks_of, iter_records


class StreamOptions(BaseModel):
    """``stream:`` of a dataset spec: how many rows are read and encoded at a time, and
    how many document vectors go in one on-disk shard (a shard's FAISS copy is what
    search holds in memory: ``shard_rows × dim × 4`` bytes)."""

    model_config = ConfigDict(extra="forbid")

    block_rows: int = Field(default=10_000, ge=1)
    shard_rows: int = Field(default=100_000, ge=1)


@dataclass(frozen=True, eq=False)
class StreamedCorpus:
    """The corpus of a streamed dataset: its file, its ids in corpus order, and which
    rows a slice keeps (``rows``; ``None`` keeps all)."""

    path: Path
    use_titles: bool
    ids: tuple[str, ...]
    rows: frozenset[int] | None
    options: StreamOptions

    def __len__(self) -> int:
        return len(self.ids)

    def records(self) -> Iterator[TextRecord]:
        """The kept rows, in corpus order; a file whose ids changed since it was first
        read is an error naming the row."""
        kept = 0
        for row, record in enumerate(_read(self.path, self.use_titles,
                                           self.options.block_rows)):
            if self.rows is not None and row not in self.rows:
                continue
            if kept >= len(self.ids) or record.id != self.ids[kept]:
                raise _changed(self.path, record.line)
            kept += 1
            yield record
        if kept != len(self.ids):
            raise _changed(self.path, None)

    def blocks(self, title_separator: str | None = " ") -> Iterator[TextBlock]:
        """Blocks of ``block_rows`` (ids, texts to encode)."""
        return blocks_of(self.records(), self.options.block_rows, title_separator)

    def encoding_pairs(self, title_separator: str | None = " ") -> Iterator[tuple[str, str]]:
        """``(id, text to encode)`` in corpus order, as :meth:`Corpus.encoding_pairs`."""
        for record in self.records():
            yield record.id, encoding_text(record.title, record.text, title_separator)

    def head_texts(self, title_separator: str | None, limit: int) -> list[str]:
        """The first ``limit`` texts to encode (the parity sample reads these)."""
        texts: list[str] = []
        for _id, text in self.encoding_pairs(title_separator):
            if len(texts) >= limit:
                break
            texts.append(text)
        return texts


def is_streamed(dataset: Dataset) -> bool:
    return isinstance(dataset.corpus, StreamedCorpus)


def sample_texts(dataset: Dataset, title_separator: str | None) -> list[str]:
    """Corpus texts to encode for what samples them (parity texts, load-test pools): all
    of a loaded corpus, the first block of a streamed one, which is never read whole."""
    corpus = dataset.corpus
    if isinstance(corpus, StreamedCorpus):
        return corpus.head_texts(title_separator, corpus.options.block_rows)
    return corpus.texts_for_encoding(title_separator)


def stream_file(path: Path, options: StreamOptions, *, use_titles: bool = True,
                ) -> StreamedCorpus:
    """A whole corpus file (jsonl, parquet, Arrow) as ``evalq run`` streams it, without a
    dataset around it: what ``bench/scale.py`` measures and the tests encode, so both go
    through :func:`evalq.execute.streamed.encode_corpus`, the run's own code. Only the
    ids are held; rows are read again block by block."""
    ids = tuple(record.id for record in _read(path, use_titles, options.block_rows))
    return StreamedCorpus(path, use_titles, ids, None, options)


def open_streamed(
    name: str, corpus_path: Path, queries: Sequence[TextRecord], qrels: Qrels, *,
    qrels_file: Path, use_titles: bool, options: StreamOptions, assembly: AssemblyOptions,
    source: dict[str, Any], max_queries: int | None, max_docs: int | None,
) -> tuple[Dataset, str]:
    """The streamed dataset (sliced when limits are given) and the fingerprint of the
    full data (what a manifest verifies)."""
    check_limit(max_queries, "max_queries")
    check_limit(max_docs, "max_docs")
    notes: list[str] = []
    first: dict[str, int] = {}  # id -> its line: ids only, never the texts
    empty: list[TextRecord] = []
    for record in _read(corpus_path, use_titles, options.block_rows):
        if record.id in first:
            earlier = record._replace(title="", text="", line=first[record.id])
            check_unique([earlier, record], BEIR_FIELDS, "document")
        first[record.id] = record.line
        if not record.text.strip() and not record.title.strip():
            empty.append(record)
    if not first:
        raise InputError("the corpus has no documents", file=corpus_path,
                         fix="point the dataset at a non-empty corpus")
    doc_ids = tuple(first)
    del first
    check_unique(queries, BEIR_FIELDS, "query")
    judged = check_judgments(qrels, {r.id for r in queries}, set(doc_ids), qrels_file, notes)
    kept = keep_queries(queries, judged, assembly)
    empty_docs = check_empty(empty, BEIR_FIELDS, "document", assembly, notes,
                             total=len(doc_ids))
    empty_queries = check_empty(kept.records, BEIR_FIELDS, "query", assembly, notes)
    all_queries, all_qrels = kept.queries, kept.qrels

    n_queries = len(all_queries) if max_queries is None else min(max_queries, len(all_queries))
    n_docs = len(doc_ids) if max_docs is None else min(max_docs, len(doc_ids))
    sliced = n_queries < len(all_queries) or n_docs < len(doc_ids)
    queries_kept, qrels_kept, rows, kept_ids = all_queries, all_qrels, None, doc_ids
    slice_info: dict[str, Any] | None = None
    if sliced:
        query_ids = all_queries.ids[:n_queries]
        queries_kept = Queries(ids=query_ids, texts=all_queries.texts[:n_queries])
        chosen, relevant_total = choose_documents(doc_ids, all_qrels, query_ids, n_docs)
        rows = frozenset(chosen)
        kept_ids = tuple(doc_ids[i] for i in chosen)
        judgments, dropped = restrict_judgments(all_qrels, query_ids, doc_ids, set(kept_ids))
        qrels_kept = Qrels(judgments=judgments)
        slice_info = (relevant_total, dropped)

    full_fp, part_fp = _fingerprints(corpus_path, use_titles, options, doc_ids, rows,
                                     kept_ids, all_queries, all_qrels, queries_kept,
                                     qrels_kept)
    full_source = dict(source)
    full_source.update(assembly_record(len(doc_ids), kept, judged, assembly, empty_docs,
                                       empty_queries, notes))
    full_source["stream"] = {"block_rows": options.block_rows, "shard_rows": options.shard_rows}
    if slice_info is not None:
        full_source["slice"] = slice_record(name, max_queries, max_docs, len(queries_kept),
                                            len(kept_ids), full_fp, *slice_info)
    corpus = StreamedCorpus(corpus_path, use_titles, kept_ids, rows, options)
    dataset = Dataset(name=name, corpus=corpus, queries=queries_kept,  # type: ignore[arg-type]
                      qrels=qrels_kept, fingerprint=part_fp or full_fp, source=full_source)
    return dataset, full_fp


def _fingerprints(
    path: Path, use_titles: bool, options: StreamOptions, doc_ids: tuple[str, ...],
    rows: frozenset[int] | None, kept_ids: tuple[str, ...], queries: Queries, qrels: Qrels,
    queries_kept: Queries, qrels_kept: Qrels,
) -> tuple[str, str | None]:
    """The full data's fingerprint and, for a slice, the slice's: ids from memory, then
    one pass for titles and one for texts, each feeding both digests."""
    full = DatasetDigest(len(doc_ids))
    part = DatasetDigest(len(kept_ids)) if rows is not None else None
    full.feed(doc_ids)
    if part is not None:
        part.feed(kept_ids)
    for field in ("title", "text"):
        whole = StreamedCorpus(path, use_titles, doc_ids, None, options)
        values = (getattr(r, field) for r in whole.records())
        if part is None:
            full.feed(values)
            continue
        for row, value in enumerate(values):
            full.feed((value,))
            if row in rows:  # type: ignore[operator]
                part.feed((value,))
    return (full.finish(queries, qrels),
            part.finish(queries_kept, qrels_kept) if part is not None else None)


def _read(path: Path, use_titles: bool, block_rows: int) -> Iterator[TextRecord]:
    return iter_records(path, id_field="_id", text_field="text",
                        title_field="title" if use_titles else None, block_rows=block_rows)


def _changed(path: Path, line: int | None) -> InputError:
    return InputError(message="the corpus changed while the run was reading it (its ids no "
                      "longer match the first read)", file=path, line=line,
                      fix="do not rewrite a corpus file during a run; rerun on the final file")
