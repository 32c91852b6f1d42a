"""The Python API: ``evalq.run``, ``evalq.load_results`` and :class:`Results`.

Users of this field work in notebooks and in their own repositories as often as on the
command line (MTEB, ranx and BEIR are libraries first), so the same run is one function
call, and what it wrote is one object: verdicts, a tidy table (``to_pandas``), per-query
frames and the TREC run files. The CLI's ``evalq run`` calls :func:`run`, so both paths
are one code path. :class:`Results` only *reads* a results folder; nothing here
recomputes a figure the run did not store.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalq.app import console
from evalq.core.errors import InputError
from evalq.core.gates import stored_verdict
from evalq.execute.evaluate import RunOutcome, run_recipe
from evalq.recipe.plan import build_plan
from evalq.recipe.schema import Recipe, RecipeSource, load_recipe_source
from evalq.report.console import print_run_table
from evalq.report.runview import RunView
from evalq.report.search_console import search_text
from evalq.report.sensitivity import sensitivity_text
from evalq.results.folder import RunFolder, RunManifest, RunSummary, stored_checks

if TYPE_CHECKING:
    import pandas as pd

    from evalq.results.schema import GateCheck, RunManifest, RunSummary, VariantDatasetEntry

# Keyword arguments of :func:`run` that steer the run rather than change the recipe.
RUN_OPTIONS = ("output", "max_queries", "max_docs", "only", "use_cache", "progress", "wide",
               "executor", "address", "yes")


@dataclass(frozen=True)
class GateVerdict:
    """One gate check of one variant on one dataset."""

    dataset: str
    gate: str
    verdict: str  # pass | fail | inconclusive
    passed: bool
    reason: str


@dataclass(frozen=True)
class VariantVerdict:
    """A candidate's verdict (pass, fail, inconclusive or ungated: no gate applied to
    it, so nothing was certified), whether it passed, and each check's verdict."""

    variant: str
    passed: bool
    checks: tuple[GateVerdict, ...]
    verdict: str = "pass"


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:  # pragma: no cover - pandas ships with the cpu extra

        raise InputError(message="Results.to_pandas() needs pandas",
                         fix="pip install pandas") from None
    return pandas


_WORST = {"fail": 2, "inconclusive": 1, "pass": 0}


def _checks(entry: VariantDatasetEntry | None) -> list[GateCheck]:
    return [] if entry is None or entry.gate is None else list(entry.gate.checks)


def _of(part: Any, name: str) -> Any:
    """A field of an optional part (``None`` when the part is absent)."""
    return None if part is None else getattr(part, name)


class Results:
    """A finished results folder (``summary.json`` + ``manifest.json`` + per-query files)."""

    def __init__(self, folder: str | Path) -> None:
        if not isinstance(folder, str | Path):
            raise InputError(message=f"a results folder is a path, got {type(folder).__name__}",
                             field="folder", fix="pass the folder 'evalq run' wrote, e.g. "
                             "evalq.load_results('results/quickstart')")
        self.folder = Path(folder)
        self._run_folder = RunFolder(self.folder)
        # Parsed through the results models (a damaged file is an InputError naming the
        # field); ``summary``/``manifest`` keep the files' mappings for callers of 0.1.
        self.summary: dict[str, Any] = self._run_folder.read_summary_data()
        self.manifest: dict[str, Any] = self._run_folder.read_manifest_data()
        self.typed: RunSummary = RunSummary.model_validate(self.summary)
        self.typed_manifest: RunManifest = RunManifest.model_validate(self.manifest)

    def __repr__(self) -> str:
        verdict = "passed" if self.passed else "FAILED"
        return (f"Results({str(self.folder)!r}: recipe {self.typed.recipe!r}, "
                f"{len(self.variants)} variants, {verdict})")

    # -- verdicts ------------------------------------------------------------------------
    @property
    def passed(self) -> bool:
        """True when every candidate passed every gate (exit code 0 of ``evalq run``)."""
        return self.typed.passed

    @property
    def reference(self) -> str:
        return self.typed.reference

    @property
    def variants(self) -> list[str]:
        return list(self.typed.variants)

    @property
    def datasets(self) -> list[str]:
        return list(self.typed.datasets)

    @property
    def failed_gates(self) -> list[str]:
        return list(self.typed.failed_gates)

    @property
    def verdicts(self) -> dict[str, VariantVerdict]:
        """Candidate name -> its verdict, with every gate check on every dataset."""
        out: dict[str, VariantVerdict] = {}
        for name, info in self.typed.variants.items():
            if info.role != "candidate":
                continue
            checks = tuple(
                GateVerdict(ds, c.gate, c.verdict, c.passed, c.reason)
                for ds, entry in self.typed.datasets.items()
                for c in _checks(entry.variants.get(name)))
            verdict = stored_verdict(info.verdict, info.passed,
                                     stored_checks(self.typed, name))
            out[name] = VariantVerdict(name, bool(info.passed), checks, verdict)
        return out

    # -- tables --------------------------------------------------------------------------
    def rows(self) -> list[dict[str, Any]]:
        """One dict per dataset × variant × metric (what :meth:`to_pandas` tabulates)."""
        rows: list[dict[str, Any]] = []
        for ds, ds_entry in self.typed.datasets.items():
            for variant, entry in ds_entry.variants.items():
                checks = _checks(entry)
                for against, figures_by in (("qrels", entry.metrics),
                                            ("reference", entry.reference_metrics or {})):
                    for metric, figures in figures_by.items():
                        delta = getattr(figures, "vs_reference", None)
                        verdicts = [c.verdict for c in checks if c.gate.split(" ")[0] == metric]
                        rows.append({
                            "dataset": ds, "variant": variant, "role": entry.role,
                            "metric": metric, "against": against,
                            "value": figures.value, "ci_low": figures.ci_low,
                            "ci_high": figures.ci_high, "n": figures.n,
                            "delta": _of(delta, "delta"), "delta_ci_low": _of(delta, "ci_low"),
                            "delta_ci_high": _of(delta, "ci_high"),
                            "p_value": _of(delta, "p_value"), "mde": _of(delta, "mde"),
                            "verdict": max(verdicts, key=lambda v: _WORST.get(v, 3))
                            if verdicts else None,
                        })
        return rows

    def to_pandas(self) -> pd.DataFrame:
        """One row per dataset × variant × metric: value and CI, the paired delta to the
        reference and its CI (qrels measures), and the worst gate verdict on that metric
        (None when no gate reads it)."""
        return _pandas().DataFrame(self.rows())

    def per_query(self, dataset: str | None = None, variant: str | None = None
                  ) -> pd.DataFrame:
        """Per-query values: columns ``dataset``, ``variant``, ``query_id`` and one per
        measure; filter by dataset and/or variant."""
        pandas = _pandas()
        for name, value, known in (("dataset", dataset, self.datasets),
                                   ("variant", variant, self.variants)):
            if value is not None and value not in known:  # not "the folder is incomplete"
                raise InputError(message=f"{self.folder} has no {name} {value!r}",
                                 file=self.folder / "summary.json", field=name,
                                 fix=f"use one of: {', '.join(known) or '(none)'}")
        frames = []
        for ds in self.datasets if dataset is None else [dataset]:
            for name in self.variants if variant is None else [variant]:
                values = self._run_folder.read_per_query(ds, name)
                frame = pandas.DataFrame({k: list(v) for k, v in values.values.items()})
                frame.insert(0, "query_id", list(values.query_ids))
                frame.insert(0, "variant", name)
                frame.insert(0, "dataset", ds)
                frames.append(frame)
        if not frames:  # a folder with no dataset or no variant: an empty table, not a crash
            return pandas.DataFrame(columns=["dataset", "variant", "query_id"])
        return pandas.concat(frames, ignore_index=True)

    @property
    def run_files(self) -> dict[tuple[str, str], Path]:
        """(dataset, variant) -> TREC run file, for trec_eval, ranx or ir_measures."""
        return {(ds, name): self.folder / "runs" / ds / f"{name}.trec"
                for ds in self.datasets for name in self.variants
                if (self.folder / "runs" / ds / f"{name}.trec").is_file()}


def load_results(folder: str | Path) -> Results:
    """Open a finished results folder (exit-2 style InputError when it is not one)."""
    return Results(folder)


def run_recipe_file(source: str | Path | Mapping[str, Any] | Recipe, **options: Any
                    ) -> RunOutcome:
    """Plan and run a recipe (a file, a built-in name, a dict or a ``Recipe``), printing
    nothing but progress: :func:`run` without the console table. ``options`` are
    :func:`execute_recipe`'s."""
    return execute_recipe(load_recipe_source(source), **options)


def execute_recipe(loaded: RecipeSource, *, output: Path | None = None,
                   max_queries: int | None = None, max_docs: int | None = None,
                   only: list[str] | None = None, use_cache: bool = True,
                   progress: bool | None = None, executor: str | None = None,
                   address: str | None = None, yes: bool = False) -> RunOutcome:
    """The one place a run is planned: every recipe error that can be known before work,
    at once (``evalq.recipe.plan``); the executor then takes the plan. ``yes`` lets a
    search grid larger than its ``max_combinations`` start."""
    plan = build_plan(loaded.recipe, loaded.path, output=output, only=only,
                      max_queries=max_queries, max_docs=max_docs, use_cache=use_cache,
                      located=loaded.located, confirm_large=yes)
    return run_recipe(plan, progress=progress, executor=executor,
                      address=address)


def run(recipe_or_path: str | Path | Mapping[str, Any] | Recipe, **overrides: Any) -> Results:
    """Run a recipe end to end, print its console table and return its :class:`Results`.

    ``recipe_or_path``: a recipe file, a built-in recipe name (``"quickstart"``), a dict
    with a recipe's keys, or a loaded ``Recipe``. Keyword arguments named in
    ``RUN_OPTIONS`` steer the run (``output``, ``max_queries``, ``max_docs``, ``only``,
    ``use_cache``, ``progress``, ``wide`` (the full table), ``executor``, ``address``,
    ``yes`` (start a search grid above its ``max_combinations``));
    any other keyword replaces that top-level recipe key (``datasets=[...]``,
    ``candidates=[...]``) and is validated like the file. A failed gate is a finding, not
    an exception: check ``results.passed``. Bad input raises
    ``evalq.core.errors.InputError`` naming the file, the field and the fix.
    """

    _check_recipe_argument(recipe_or_path)
    console.install()  # its progress lines show, as `evalq run`'s do
    options = {k: overrides.pop(k) for k in RUN_OPTIONS if k in overrides}
    if options.get("output") is not None:
        options["output"] = _output_folder(options["output"])
    if options.get("only") is not None:
        options["only"] = _variant_names(options["only"])
    wide = bool(options.pop("wide", False))
    loaded = load_recipe_source(recipe_or_path, overrides)
    outcome = execute_recipe(loaded, **options)
    # The console table goes to stdout after the run's progress (stderr), and shows what
    # the folder holds (`evalq run` prints through here too).
    view = RunView.load(outcome.output)
    print_run_table(view, wide=wide)
    if loaded.recipe.batch_sensitivity is not None:
        text = sensitivity_text(view.summary)
        if text:
            print(text)
    if view.summary is not None and view.summary.search is not None:
        print(search_text(view.summary.search))
    return Results(outcome.output)


def _check_recipe_argument(value: Any) -> None:
    """What :func:`run` takes, said in words: ``run(42)`` / ``run(None)`` / ``run(b"...")``
    ended in a raw pathlib TypeError."""
    if isinstance(value, str | Path | Mapping | Recipe):
        return
    got = type(value).__name__
    hint = (" (decode the bytes: run(path.decode()))" if isinstance(value, bytes) else
            " (a Results is what run() returns; pass the recipe that made it)"
            if isinstance(value, Results) else "")
    raise InputError(message=f"evalq.run() takes a recipe, not {got}{hint}",
                     field="recipe_or_path",
                     fix="pass a recipe file path, a built-in recipe name ('quickstart'), a "
                     "dict of recipe keys, or a Recipe (evalq.recipe.schema.load_recipe)")


def _output_folder(value: Any) -> Path:
    if isinstance(value, str | Path) and str(value):
        return Path(value)
    raise InputError(message=f"output is a folder path, not {type(value).__name__} "
                     f"{value!r}", field="output",
                     fix="pass output='results/my-run' (a str or pathlib.Path)")


def _variant_names(value: Any) -> list[str]:
    """``only='int8'`` is one variant's name (it was iterated as characters); a list,
    tuple or set holds names."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple | set | frozenset) and all(
            isinstance(v, str) for v in value):
        return list(value)
    raise InputError(message=f"only names variants, not {type(value).__name__} {value!r}",
                     field="only", fix="pass one name (only='int8') or a list of names "
                     "(only=['fp32', 'int8'])")
