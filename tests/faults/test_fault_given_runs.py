"""A pipeline's TREC-run first stage (``first_stage: {kind: run, run: FILE}``), issue 32's
UNCLEAR cases pl_run_dir and pl_run_partial: a folder given as the run file is named as a
folder (it used to say 'does not exist'), and a run that ranks 1 of 4 queries is warned
about (the other three score 0 without a word)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from evalq.core.errors import InputError
from evalq.data.assemble import DatasetWarning
from evalq.execute.given_runs import run_file

DOCS = ("d1", "d2", "d3")
QUERIES = ("q1", "q2", "q3", "q4")


def test_a_folder_as_the_run_file_is_named_as_a_folder(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        run_file(tmp_path, DOCS, QUERIES, "pipelines.0.first_stage.run")
    text = str(caught.value)
    assert "is a folder, not a file" in text and "does not exist" not in text
    assert caught.value.field == "pipelines.0.first_stage.run" and caught.value.fix


def test_a_run_covering_one_query_of_four_is_warned_about(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    path.write_text("q1 Q0 d1 1 2.0 bm25\nq1 Q0 d2 2 1.0 bm25\n")
    with pytest.warns(DatasetWarning, match=r"1 of the dataset's 4 queries"):
        got = run_file(path, DOCS, QUERIES, "pipelines.0.first_stage.run")
    assert got.ranking is not None


def test_a_run_covering_every_query_is_not_warned_about(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    path.write_text("".join(f"{q} Q0 d1 1 1.0 bm25\n" for q in QUERIES))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DatasetWarning)
        run_file(path, DOCS, QUERIES, "pipelines.0.first_stage.run")
