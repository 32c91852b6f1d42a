"""Names that become paths cannot leave the results folder.

Every name the results use as a file or folder name (dataset, variant, pipeline, load
workload, recipe) is checked by one rule (:mod:`evalq.core.names`) at its recipe line,
exit 2, by ``evalq validate`` as by ``evalq run``; and a real run, watched through
Python's audit hook, writes nothing outside its results folder and its cache."""

from __future__ import annotations

import getpass
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from faultkit import no_traceback, recipe_data, run_cli

from evalq.core.errors import InputError
from evalq.core.names import MAX_NAME_LENGTH, inside, path_name_problem
from evalq.data.manifest import load_dataset
from support import recipes

HOSTILE = ["../escaped", "../../etc/x", "/tmp/abs", "a/b", "a\\b", ".hidden", "..", ".",
           "", "a\x00b", "with space", "c:drive", "-option", "x" * (MAX_NAME_LENGTH + 1),
           "new\nline", "é"]


@pytest.mark.parametrize("name", HOSTILE)
def test_the_rule_refuses_unsafe_components(name: str) -> None:
    assert path_name_problem(name) is not None


ESCAPING = ["../escaped", "../../etc/x", "/tmp/abs", "a/../../b", "a\\b", "..", ".", "",
            "a\x00b", "a//b", "x" * 256]


@pytest.mark.parametrize("name", ESCAPING)
def test_writers_refuse_a_name_that_would_leave_the_folder(name: str) -> None:
    with pytest.raises(InputError, match="cannot be a file name"):
        inside(Path("/r"), "per_query", name)
    # names evalq composes from checked ones stay writable
    assert inside(Path("/r"), "pipelines", "p", "bm25+fp32@5.jsonl") == Path(
        "/r/pipelines/p/bm25+fp32@5.jsonl")
    assert inside(Path("/r"), "per_query", "d", "batch-sensitivity/v/c.jsonl") == Path(
        "/r/per_query/d/batch-sensitivity/v/c.jsonl")


@pytest.mark.parametrize("name", ["tiny", "beir-tiny", "int8_vectors", "a.b", "A1",
                                  "x" * MAX_NAME_LENGTH])
def test_the_rule_keeps_ordinary_names(name: str) -> None:
    assert path_name_problem(name) is None


def _set(data: dict[str, Any], where: str, name: str) -> None:
    if where == "dataset":
        data["datasets"][0]["name"] = name
    elif where == "candidate":
        data["candidates"][0]["name"] = name
    elif where == "recipe":
        data["name"] = name
    elif where == "pipeline":
        data["pipelines"] = [{"name": name, "first_stage": {"kind": "bm25"}, "depths": [5],
                              "reranker": {"model": "x"}}]


@pytest.mark.parametrize("where", ["dataset", "candidate", "recipe", "pipeline"])
@pytest.mark.parametrize("name", ["../escaped", "/tmp/evalq-abs", "a/b", ".hidden", ""])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_unsafe_names_are_refused_at_their_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str, name: str,
        command: str) -> None:
    data = recipe_data(tmp_path)
    _set(data, where, name)
    recipe = recipes.write(tmp_path / "recipe.yaml", data)
    before = set(tmp_path.parent.iterdir())
    result = run_cli(capsys, command, str(recipe))
    assert result.code == 2, result.err
    assert f"{recipe}:" in result.err and no_traceback(result.err)
    assert "safe file name" in result.err or "at least 1 character" in result.err, result.err
    assert not (tmp_path / "out").exists()
    assert set(tmp_path.parent.iterdir()) == before  # nothing appeared next to it


def test_a_manifest_file_name_that_is_not_safe_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A dataset without ``name:`` is named by its manifest's file; that name is checked."""
    data = recipe_data(tmp_path)
    spec = dict(data["datasets"][0])
    del spec["name"]
    (tmp_path / "datasets").mkdir()
    recipes.write(tmp_path / "datasets" / "my data.yaml", spec)
    data["datasets"] = ["my data"]
    recipe = recipes.write(tmp_path / "recipe.yaml", data)
    result = run_cli(capsys, "validate", str(recipe))
    assert result.code == 2 and "my data.yaml" in result.err, result.err
    assert "add `name:" in result.err or "give the dataset a `name:`" in result.err


class _Writes:
    """Every path a Python process opens for writing, creates, renames or removes, from
    the audit hook (it sees what the run's own code, numpy, faiss's Python side and
    sqlite3 do through Python's file functions)."""

    WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC

    def __init__(self) -> None:
        self.on = False
        self.paths: list[str] = []
        sys.addaudithook(self._hook)

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.on:
            return
        if event == "open" and args and isinstance(args[0], str | bytes | os.PathLike):
            mode, flags = args[1], args[2]
            writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
                isinstance(flags, int) and flags & self.WRITE_FLAGS)
            if writes:
                self.paths.append(os.fsdecode(args[0]))
        elif event in ("os.mkdir", "os.remove", "os.rmdir", "os.truncate", "os.symlink",
                       "os.link", "shutil.copyfile", "shutil.move"):
            self.paths.append(os.fsdecode(args[0]))
        elif event == "os.rename":
            self.paths += [os.fsdecode(args[0]), os.fsdecode(args[1])]
        elif event == "sqlite3.connect" and args and args[0] not in (":memory:", b":memory:"):
            self.paths.append(os.fsdecode(args[0]))


# Written by libraries, not by evalq: the null device, and torch's inductor cache folder
# (created when torch sets up, wherever evalq's outputs are configured to go).
_NOT_EVALQS = {os.devnull, str(Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}")}



def _is_write_probe(path: str) -> bool:
    """The plan's check that an output folder can be created makes and removes one empty
    file in the nearest existing folder (core.atomicio.check_output_location); the disk
    check below shows it leaves nothing."""
    return Path(path).name.startswith(".evalq-write-check.")


_WRITES = _Writes()  # one hook per process (audit hooks cannot be removed)


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.parametrize("cache", ["inside", "outside"])
def test_every_file_a_run_writes_lies_under_its_folders(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        cache: str) -> None:
    out = tmp_path / "out"
    cache_dir = out / "cache" if cache == "inside" else tmp_path / "elsewhere" / "cache"
    data = recipe_data(tmp_path, out=out, cache=cache_dir)
    recipe = recipes.write(tmp_path / "recipe.yaml", data)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    _WRITES.paths.clear()
    _WRITES.on = True
    try:
        result = run_cli(capsys, "run", str(recipe))
    finally:
        _WRITES.on = False
    assert result.code in (0, 1), result.err
    allowed = [out.resolve(), cache_dir.resolve()]
    # (a folder above one of them is created for it: an ancestor counts as inside)
    outside = [p for p in _WRITES.paths
               if not any(Path(p).resolve().is_relative_to(a) or a.is_relative_to(Path(p))
                          for a in allowed) and p not in _NOT_EVALQS
               and not _is_write_probe(p)]
    assert _WRITES.paths and not outside, outside
    # and on disk: the work folder stayed empty, nothing new beside the folders
    assert not any(work.iterdir())
    expected = {out, tmp_path / "recipe.yaml", work} | (
        {tmp_path / "elsewhere"} if cache == "outside" else set())
    assert set(tmp_path.iterdir()) == expected


@pytest.mark.parametrize("by", ["name", "path"])
def test_load_dataset_checks_a_manifest_file_name_as_validate_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], by: str) -> None:
    """The Python API's ``load_dataset`` used to take an unsafe manifest file name as the
    dataset's name unchecked; it now runs the one check ``validate`` and ``run`` run."""
    data = recipe_data(tmp_path)
    spec = dict(data["datasets"][0])
    del spec["name"]
    (tmp_path / "datasets").mkdir()
    manifest = recipes.write(tmp_path / "datasets" / "my data.yaml", spec)
    data["datasets"] = ["my data"]
    cli = run_cli(capsys, "validate", str(recipes.write(tmp_path / "recipe.yaml", data)))
    with pytest.raises(InputError) as caught:
        if by == "name":
            load_dataset("my data", search_dirs=[tmp_path / "datasets"])
        else:
            load_dataset(str(manifest))
    assert caught.value.file == manifest and caught.value.field == "name"
    assert str(caught.value) in cli.err  # the same check, the same words
