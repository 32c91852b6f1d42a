"""A BEIR folder whose ``corpus.jsonl`` (or queries, or the split's qrels) is a folder
(issue 32, UNCLEAR case ds_d_corpusdir): it used to say 'missing corpus.jsonl', which sends
the user looking for a file that is there, as a folder; now it says so."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from evalq.core.errors import InputError
from evalq.data.beir import check_layout

TINY = Path(__file__).resolve().parents[1] / "data" / "beir-tiny"


@pytest.mark.parametrize("name", ["corpus.jsonl", "queries.jsonl", "qrels/test.tsv"])
def test_a_folder_where_a_file_belongs_is_named_as_a_folder(tmp_path: Path, name: str) -> None:
    folder = tmp_path / "beir"
    shutil.copytree(TINY, folder)
    (folder / name).unlink()
    (folder / name).mkdir()
    with pytest.raises(InputError) as caught:
        check_layout(folder, "test")
    text = str(caught.value)
    assert f"{name} is a folder, not a file" in text and "missing" not in text
    assert caught.value.fix


def test_the_intact_folder_passes(tmp_path: Path) -> None:
    assert all(p.is_file() for p in check_layout(TINY, "test"))
