"""``evalq gate RESULTS_DIR``: print what ``evalq.execute.regate`` re-decided and write the
CI outputs it asks for (``--junit``, ``--markdown``). The decisions are the executor's;
this prints them and writes the reports (the app alone prints for a command)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evalq.core import atomicio
from evalq.core.errors import InputError
from evalq.core.host import current_class
from evalq.execute.regate import Regated, regate
from evalq.plan.run import RunSections
from evalq.recipe.stored import stored_search, stored_sections
from evalq.report.junit import to_junit
from evalq.report.markdown import job_summary
from evalq.report.runview import class_warning
from evalq.report.search_console import search_text
from evalq.report.verdict import gates_word
from evalq.results.folder import RunFolder


def stored_sections_of(results: str | Path, method: str | None = None) -> RunSections:
    """The deciding sections of the recipe a results folder's manifest stores (the
    manifest's typed check first, so a damaged file names its field), for the executors
    that re-decide it (regate, calibrate) and take no recipe."""
    folder = RunFolder(results)
    folder.read_manifest()
    return stored_sections(folder.read_manifest_data().get("recipe"), method,
                           folder.root / "manifest.json")


def gate_command(results: str | Path, *, junit: str | Path | None = None,
                 markdown: str | Path | None = None, method: str | None = None) -> bool:
    """Re-decide, print every verdict with its checks, write the requested outputs;
    returns whether every gate passed. Each output's place is checked first (a file where
    a folder is needed is named as such, not as an OS error), before any work."""
    for path, flag in ((junit, "--junit"), (markdown, "--markdown")):
        if path is not None:
            atomicio.check_output_location(path, folder=False, field=flag,
                                           what=flag.lstrip("-"))
    sections = stored_sections_of(results, method)  # checks the manifest first
    folder = RunFolder(results)
    search = stored_search(folder.read_manifest_data().get("recipe"), method,
                           folder.root / "manifest.json")
    done = regate(results, sections, search)
    print_verdicts(done)
    if junit is not None:
        try:
            atomicio.write_text(junit, to_junit(done.verdicts,
                                                suite_name=f"evalq.{done.recipe_name}",
                                                pipelines=done.pipeline_verdicts,
                                                host=folder.read_manifest().host))
        except OSError as exc:
            raise InputError(message=f"cannot write the JUnit report ({exc.strerror})",
                             file=junit, field="--junit",
                             fix="give --junit a path in a writable folder") from None
    if markdown is not None:
        try:
            atomicio.write_text(markdown, job_summary(done.root, done.manifest, done.summary))
        except OSError as exc:
            raise InputError(message=f"cannot write the markdown summary ({exc.strerror})",
                             file=markdown, field="--markdown",
                             fix="give --markdown a path in a writable folder") from None
    if done.decided.search is not None:
        print(search_text(done.decided.search))
    print("gates " + gates_word(done.decided))
    return done.passed


def print_host(host: dict[str, Any] | None) -> None:
    """Which numerics class the verdicts were decided on, and a warning when this machine
    is of another class: re-deciding reads stored values, so the verdicts still hold for
    the class that measured them, not for this machine."""
    stored = None if host is None else host.get("numerics_class")
    unknown = "an unrecorded numerics class (folder written before host facts)"
    print(f"certified on: {stored or unknown}")
    warning = class_warning({"the folder": stored, "this machine": current_class()})
    if stored is not None and warning is not None:
        print(warning)


def print_verdicts(done: Regated) -> None:
    """The verdict lines: a note per re-decided pipeline verdict that differs from the
    run's, each candidate and pipeline combination with its checks, the interval method,
    and a note when the stored summary disagrees."""
    for label in done.changed:
        print(f"note: {label}: re-decided verdicts differ from the run's")
    for name, gate in {**done.verdicts, **done.pipeline_verdicts}.items():
        # The verdict as the run decided it (core.gates.outcome): a candidate that failed
        # no check but could not be certified is INCONCLUSIVE, not FAIL.
        print(f"{gate.verdict.upper()}  {name}")
        for check in gate.checks:
            print(f"      [{check.verdict}] {check.gate}: {check.reason}")
    print_host(done.manifest.get("host"))
    stats = done.summary["stats"]
    print(f"interval method: {stats['method']} (min_nonzero {stats['min_nonzero']})")
    if done.stored_passed != done.summary["passed"]:
        print(f"note: the stored summary says passed={done.stored_passed}, re-decided "
              f"passed={done.summary['passed']}")
