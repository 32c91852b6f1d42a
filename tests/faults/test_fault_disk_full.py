"""A disk filling up mid-write: the ``OSError`` that ``write()`` / ``fsync()`` raise names
no file, so the message must get the file from the writer (issue 32: run_enospc_cache,
out_enospc, disk_out_enospc, disk_cache_enospc)."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import pytest
from faultkit import no_traceback, run_cli, write_recipe

from evalq.core import atomicio


def _full_fsync(fd: int) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))  # as the kernel reports it


def test_full_disk_in_atomic_write_names_the_file(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(atomicio.os, "fsync", _full_fsync)
    target = tmp_path / "out" / "manifest.json"
    with pytest.raises(OSError) as caught:
        atomicio.write_json(target, {"a": 1})
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(target)
    assert not list(target.parent.glob(".*.tmp"))  # no half-written temporary left


def test_full_disk_in_a_built_folder_names_the_target(tmp_path: Path) -> None:
    def build(work: Path) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(OSError) as caught:
        atomicio.built_folder(tmp_path / "graphs" / "g1", build, complete=lambda p: False)
    assert caught.value.filename == str(tmp_path / "graphs" / "g1")


def test_run_on_a_full_disk_names_the_file_and_the_fix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls = {"n": 0}
    real = os.fsync

    def fill_after_some(fd: int) -> Any:
        calls["n"] += 1
        if calls["n"] > 2:
            _full_fsync(fd)
        return real(fd)

    monkeypatch.setattr(atomicio.os, "fsync", fill_after_some)
    result = run_cli(capsys, "run", str(write_recipe(tmp_path)), folder=tmp_path / "out")
    assert result.code == 2 and no_traceback(result.err)
    assert "No space left on device" in result.err
    assert str(tmp_path) in result.err  # the file being written, in the results or cache
    assert "free disk space" in result.err
