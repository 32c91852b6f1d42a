"""First stages that are rankings already written to disk: a dense variant's run from this
results folder, or a user's production run file.

They read TREC files, so they live with the executors rather than with search
(:mod:`evalq.retrieve.firststage` ranks texts it is given and opens no file).
"""

from __future__ import annotations

import warnings
from pathlib import Path

from evalq.core.errors import InputError
from evalq.core.ranking import Ranking
from evalq.data.assemble import DatasetWarning
from evalq.data.trec import read_run, read_trec_run
from evalq.retrieve.firststage import FirstStageRun


def dense(folder_runs: Path, name: str, doc_ids: tuple[str, ...],
          encode_seconds_per_query: float | None) -> FirstStageRun:
    """A recipe variant's ranking, as ``evalq run`` searched and wrote it."""
    path = folder_runs / f"{name}.trec"
    if not path.is_file():
        raise InputError(message=f"dense first stage '{name}' has no ranking in this run "
                         f"({path} is missing)", field="first_stage",
                         fix="run the variant too (check --only)")
    return FirstStageRun(name=name, ranking=read_trec_run(path, doc_ids=doc_ids),
                         record={"kind": "dense", "variant": name, "run_file": str(path)},
                         seconds_per_query=encode_seconds_per_query,
                         forward_passes_per_query=1)


def run_file(path: Path, doc_ids: tuple[str, ...], query_ids: tuple[str, ...],
             field_name: str) -> FirstStageRun:
    """A user's production first stage: its documents outside the (sliced) corpus and
    queries outside the dataset are dropped and counted; a run that ranks only some of the
    dataset's queries is warned about (the others score 0)."""
    if path.is_dir():
        raise InputError(message=f"run file {path} is a folder, not a file", field=field_name,
                         fix="name the TREC run file inside it (qid Q0 docid rank score tag)")
    if not path.is_file():
        raise InputError(message=f"run file {path} does not exist", field=field_name,
                         fix="give the path of a TREC run file (qid Q0 docid rank score tag), "
                         "relative to the recipe")
    raw = read_run(path)
    known_docs, known_queries = set(doc_ids), set(query_ids)
    dropped_docs = 0
    run: dict[str, dict[str, float]] = {}
    for qid in query_ids:
        row = raw.get(qid, {})
        kept = {d: s for d, s in row.items() if d in known_docs}
        dropped_docs += len(row) - len(kept)
        run[qid] = kept
    ranking = Ranking.from_dict(run, doc_ids=doc_ids) if any(run.values()) else None
    if ranking is None:
        raise InputError(message=f"run file {path} ranks none of the dataset's documents for "
                         "its queries", field=field_name,
                         fix="check that query and document ids match the dataset's")
    covered = sum(1 for row in run.values() if row)
    if covered < len(query_ids):
        # A query the run does not rank has no candidates: every reranker scores 0 on it,
        # which reads as a quality loss of the pipeline rather than a partial run file.
        warnings.warn(f"{path}: the run ranks documents for {covered} of the dataset's "
                      f"{len(query_ids)} queries; the other {len(query_ids) - covered} have "
                      f"no candidates and score 0 ({field_name})", DatasetWarning, stacklevel=2)
    return FirstStageRun(name="run", ranking=ranking,
                         record={"kind": "run", "path": str(path),
                                 "dropped_documents": dropped_docs,
                                 "dropped_queries": len(set(raw) - known_queries)})
