"""The Python API on damaged or wrong input raises evalq's own exception types, carrying
the file, the field and the fix (:class:`evalq.core.errors.InputError`), never a bare
AttributeError / KeyError / ValueError from deep inside: every field of a real run's
``summary.json`` and ``manifest.json`` is damaged in turn (wrong type, null, removed) and
every public reader of :class:`evalq.Results` is called."""

from __future__ import annotations

import contextlib
import copy
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from faultkit import write_recipe

import evalq
from evalq.app.cli import main
from evalq.core.errors import InputError

pytestmark = [pytest.mark.model, pytest.mark.slow]

WRONG = [None, "text", -1.5, [], {}, True]
_GONE = object()


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("api-finished")
    assert main(["run", str(write_recipe(folder))]) in (0, 1)
    return folder / "out"


def _paths(value: Any, prefix: tuple[Any, ...] = (), depth: int = 4
           ) -> Iterator[tuple[Any, ...]]:
    """Every key path down to ``depth`` (deeper ones are per-metric figures, alike)."""
    if prefix:
        yield prefix
    if len(prefix) >= depth:
        return
    items = (value.items() if isinstance(value, dict) else
             enumerate(value) if isinstance(value, list) else ())
    for key, inner in items:
        yield from _paths(inner, (*prefix, key), depth)


def _damaged(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    out = copy.deepcopy(doc)
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    if value is _GONE:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return out


def _read_everything(folder: Path) -> None:
    results = evalq.load_results(folder)
    repr(results)
    _ = (results.passed, results.reference, results.variants, results.datasets,
         results.failed_gates, results.verdicts, results.run_files)
    results.rows()
    results.to_pandas()
    results.per_query()


@pytest.mark.parametrize("name", ["summary.json", "manifest.json"])
def test_every_damaged_field_is_an_input_error(finished: Path, tmp_path: Path,
                                               name: str) -> None:
    work = tmp_path / "work"
    shutil.copytree(finished, work)
    original = json.loads((finished / name).read_text())
    cases = crashes = 0
    failures: list[str] = []
    for path in _paths(original):
        for value in [*WRONG, _GONE]:
            (work / name).write_text(json.dumps(_damaged(original, path, value)))
            cases += 1
            try:
                _read_everything(work)
            except InputError as exc:
                assert exc.file is not None, (path, value, str(exc))
            except Exception as exc:  # the point: nothing else escapes
                crashes += 1
                failures.append(f"{'.'.join(map(str, path))}={value!r}: "
                                f"{type(exc).__name__}: {exc}")
    assert cases > 100
    assert not failures, f"{crashes} of {cases}:\n" + "\n".join(failures[:20])


def test_wrong_arguments_are_input_errors(finished: Path) -> None:
    results = evalq.load_results(finished)
    for call in (lambda: evalq.load_results(5),  # type: ignore[arg-type]
                 lambda: evalq.load_results(finished / "nothing"),
                 lambda: results.per_query("no-such-dataset"),
                 lambda: results.per_query(variant="no-such-variant")):
        with pytest.raises(InputError):
            call()


def test_a_folder_without_datasets_gives_an_empty_table(finished: Path, tmp_path: Path) -> None:
    work = tmp_path / "work"
    shutil.copytree(finished, work)
    summary = json.loads((work / "summary.json").read_text())
    summary["datasets"] = {}
    (work / "summary.json").write_text(json.dumps(summary))
    assert len(evalq.load_results(work).per_query()) == 0


# What the long fuzz tier found: loose parts of a folder holding the wrong type.
FOUND = [("summary.json", ("datasets", "tiny", "variants", "fp32", "encode", "documents"), True),
         ("manifest.json", ("recipe", "reference", "vectors"), True),
         ("manifest.json", ("recipe", "stats"), True)]


@pytest.mark.parametrize(("name", "path", "value"), FOUND)
def test_report_compare_and_calibrate_refuse_wrong_typed_loose_parts(
        finished: Path, tmp_path: Path, name: str, path: tuple[str, ...], value: Any) -> None:
    from evalq.app.compare_command import compare_runs
    from evalq.app.gate_command import stored_sections_of
    from evalq.execute.calibrate import results_populations
    from evalq.report.page import write_report

    work = tmp_path / "work"
    shutil.copytree(finished, work)
    doc = json.loads((work / name).read_text())
    (work / name).write_text(json.dumps(_damaged(doc, path, value)))
    for read in (lambda: write_report([work], work / "report.html"),
                 lambda: compare_runs(finished, work), lambda: compare_runs(work, finished),
                 lambda: results_populations(work, stored_sections_of(work))):
        with contextlib.suppress(InputError):
            read()  # accepted, or refused as bad input: nothing else
