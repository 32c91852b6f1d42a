"""The few texts a report shows, stored with the run: ``texts/<dataset>.json``.

A report reads results folders only (it must keep working when the dataset has moved or
changed), yet a person judging a most-hurt query needs to read it and the first words
of the documents each variant ranked. So the run keeps, per dataset, every judged
query's text, the first words of each document that some variant placed in its top
``top`` (nothing else of the corpus), and the judgments of those queries. The size is
bounded by queries × top × variants, not by the corpus.

``report.snippet_words: 0`` in the recipe stores no text at all (confidential corpora);
the report then shows ids only and says why.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from evalq.core.dataset import Dataset

QUERY_CHARS = 400  # a query longer than this is cut (and marked) in the stored text
SNIPPET_CHARS_PER_WORD = 12  # bounds a snippet of N words made of very long "words"


def top_documents(run_file: Path, top: int) -> dict[str, list[str]]:
    """``{query_id: [doc_id, ...]}`` of the first ``top`` ranks of a TREC run file that
    evalq wrote (its lines are already in rank order; the rank column is used as is)."""
    out: dict[str, list[str]] = {}
    with run_file.open(encoding="utf-8") as handle:
        for line in handle:
            parts = line.split()
            if len(parts) < 6 or int(parts[3]) > top:
                continue
            out.setdefault(parts[0], []).append(parts[2])
    return out


def first_words(text: str, words: int) -> str:
    """The first ``words`` words of ``text`` (whitespace collapsed), with an ellipsis
    when something was cut."""
    parts = text.split()
    cut = " ".join(parts[:words])
    limit = words * SNIPPET_CHARS_PER_WORD
    if len(cut) > limit:
        cut = cut[:limit]
    return cut + (" …" if len(parts) > words or len(cut) == limit else "")


def snippets_for(dataset: Dataset, run_files: Iterable[Path], *, top: int, words: int,
                 title_separator: str | None) -> dict[str, Any]:
    """The ``texts/<dataset>.json`` payload for one dataset (see the module docstring)."""
    shown: set[str] = set()
    for path in run_files:
        if path.is_file():
            for docs in top_documents(path, top).values():
                shown.update(docs)
    judged = dataset.qrels.judgments
    shown.update(d for q in judged.values() for d in q)
    # One pass over the corpus (a streamed one reads its file once more, keeping only
    # the shown documents' first words).
    documents = {doc_id: first_words(text, words)
                 for doc_id, text in dataset.corpus.encoding_pairs(title_separator)
                 if doc_id in shown}
    queries = {}
    for qid, text in zip(dataset.queries.ids, dataset.queries.texts, strict=True):
        if qid in judged:
            queries[qid] = text if len(text) <= QUERY_CHARS else text[:QUERY_CHARS] + " …"
    return {"top": top, "words": words, "queries": queries, "documents": documents,
            "judgments": {q: dict(j) for q, j in judged.items()}}


def write_snippets(folder: Any, datasets: Sequence[Dataset], variants: Sequence[str], *,
                   words: int, title_separator: str | None, top: int = 10) -> None:
    """Store ``texts/<dataset>.json`` for every dataset (``folder`` is the run's
    ``RunFolder``); ``words == 0`` stores nothing."""
    if words <= 0:
        return
    for ds in datasets:
        runs = [folder.root / "runs" / ds.name / f"{v}.trec" for v in variants]
        folder.write_texts(ds.name, snippets_for(ds, runs, top=top, words=words,
                                                 title_separator=title_separator))
