"""A loaded dataset written back as the files a ``source: trec`` dataset reads, so tests
can stream (``stream:``) the very data they also load whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_trec_copy(ds: Any, folder: Path) -> Path:
    """``corpus.jsonl`` (with titles), ``queries.jsonl`` and a headed ``qrels.tsv`` of
    ``ds`` in ``folder``; returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as fh:
        for i, title, text in zip(ds.corpus.ids, ds.corpus.titles, ds.corpus.texts,
                                  strict=True):
            fh.write(json.dumps({"_id": i, "title": title, "text": text}) + "\n")
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as fh:
        for i, text in zip(ds.queries.ids, ds.queries.texts, strict=True):
            fh.write(json.dumps({"_id": i, "text": text}) + "\n")
    with open(folder / "qrels.tsv", "w", encoding="utf-8") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for qid, docs in ds.qrels.judgments.items():
            fh.writelines(f"{qid}\t{d}\t{r}\n" for d, r in docs.items())
    return folder
