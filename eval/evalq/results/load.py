"""The ``load/`` part of a results folder (its own ``LOAD_SCHEMA_VERSION``).

Layout, beside ``evalq run``'s files in the same folder::

    load/summary.json                      status, settings, per variant: server, parity,
                                           workloads (steps without histograms, knee),
                                           capacity plan, decision table
    load/steps/<variant>/<workload>.jsonl  one line per finished step, with its full
                                           latency histogram (for throughput-latency curves)
    load/logs/                             logs of servers evalq started

Written atomically after every step, so a Ctrl-C or a crash keeps the finished steps; the
summary's ``status`` says ``running``, ``interrupted``, ``failed`` or ``finished``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalq.core import atomicio
from evalq.core.errors import InputError
from evalq.core.gates import stored_verdict
from evalq.core.names import inside
from evalq.results.folder import RunFolder, clean_json, stored_checks
from evalq.results.schema import parse_load_summary

LOAD_SCHEMA_VERSION = 1


class LoadFolder:
    def __init__(self, run_root: str | Path) -> None:
        self.run_root = Path(run_root)
        self.root = self.run_root / "load"
        self._steps: dict[tuple[str, str], list[dict[str, Any]]] = {}

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def prepare(self) -> None:
        try:
            self.logs.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(message=f"cannot create the results folder: {exc}",
                             file=self.root, fix="choose a writable folder with -o") from None
        stale = self.root / "summary.json"
        if stale.exists():
            stale.replace(self.root / "summary.previous.json")
        for old in (self.root / "steps").glob("*/*.jsonl"):
            old.unlink()

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        atomicio.write_json(self.root / "summary.json",
                            clean_json({"schema_version": LOAD_SCHEMA_VERSION, **summary}))

    def add_step(self, variant: str, workload: str, step: Mapping[str, Any]) -> None:
        rows = self._steps.setdefault((variant, workload), [])
        rows.append(clean_json(dict(step)))
        text = "".join(json.dumps(r, allow_nan=False) + "\n" for r in rows)
        atomicio.write_text(inside(self.root, "steps", variant, f"{workload}.jsonl"), text)

    def read_summary(self) -> dict[str, Any]:
        path = self.root / "summary.json"
        if not path.is_file():
            raise InputError(message="no load/summary.json here", file=path,
                             fix="point at a folder written by 'evalq load'")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise InputError(message=f"not valid JSON ({exc})", file=path,
                             fix="rerun 'evalq load' to write the folder again") from None
        if not isinstance(data, dict):
            raise InputError(message="not a JSON object", file=path,
                             fix="rerun 'evalq load' to write the folder again")
        if data.get("schema_version") != LOAD_SCHEMA_VERSION:
            raise InputError(message=f"load schema_version {data.get('schema_version')} is "
                             f"not supported (this evalq reads {LOAD_SCHEMA_VERSION})",
                             file=path, field="schema_version",
                             fix="use the evalq version that wrote it")
        parse_load_summary(data, path)  # a damaged file is exit 2 naming the field
        return data

    def read_steps(self, variant: str, workload: str) -> list[dict[str, Any]]:
        path = self.root / "steps" / variant / f"{workload}.jsonl"
        if not path.is_file():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def quality_verdicts(run_root: Path) -> dict[str, str]:
    """Per variant its verdict ("pass", "fail", "inconclusive", "ungated") or "reference",
    from the folder's ``summary.json`` (the latest finished ``evalq run`` of the same
    recipe), read with the typed model and decided by the one rule for stored results
    (``core.gates.stored_verdict``); empty when there is none. A damaged summary is bad
    input (exit 2) naming it: the load steps are already stored when this is read."""
    if not (Path(run_root) / "summary.json").is_file():
        return {}
    summary = RunFolder(run_root).read_summary()
    out: dict[str, str] = {}
    for name, variant in summary.variants.items():
        out[name] = "reference" if variant.role == "reference" else stored_verdict(
            variant.verdict, variant.passed,
            stored_checks(summary, name))
    return out
