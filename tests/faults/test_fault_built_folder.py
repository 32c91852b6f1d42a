"""A folder evalq builds (an exported graph, a W8A8 checkpoint, a fixture model) appears
whole or not at all: :func:`evalq.core.atomicio.built_folder`, the one mechanism they use."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalq.core.atomicio import built_folder


def _complete(folder: Path) -> bool:
    return (folder / "done").is_file()


def _build(work: Path) -> str:
    (work / "part").write_text("1")
    (work / "done").write_text("")
    return "built"


def test_an_interrupted_build_leaves_nothing_behind(tmp_path: Path) -> None:
    def interrupted(work: Path) -> None:
        (work / "part").write_text("1")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        built_folder(tmp_path / "graph", interrupted, complete=_complete)
    assert list(tmp_path.iterdir()) == []


def test_an_incomplete_folder_is_replaced_and_the_result_is_readable(tmp_path: Path) -> None:
    target = tmp_path / "graph"
    target.mkdir()
    (target / "stale").write_text("half")
    assert built_folder(target, _build, complete=_complete) == "built"
    assert sorted(p.name for p in target.iterdir()) == ["done", "part"]
    assert target.stat().st_mode & 0o777 == 0o755
    assert [p.name for p in tmp_path.iterdir()] == ["graph"]  # no staging folder left


def test_a_folder_another_process_completed_first_is_kept(tmp_path: Path) -> None:
    target = tmp_path / "graph"

    def racing(work: Path) -> str:
        target.mkdir()  # the other process renames its folder into place meanwhile
        (target / "done").write_text("theirs")
        (target / "extra").write_text("")
        return _build(work)

    assert built_folder(target, racing, complete=_complete) == "built"
    assert (target / "done").read_text() == "theirs"
    assert [p.name for p in tmp_path.iterdir()] == ["graph"]
