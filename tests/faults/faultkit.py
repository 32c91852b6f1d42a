"""Shared pieces of the fault suite: a tiny real recipe (MiniLM, 8-document BEIR set) and a
runner that calls the CLI in-process and returns exit code, stderr and the manifest."""

from __future__ import annotations

import json
import signal
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from support import recipes
from support.loopback import LoopbackServer

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "tests" / "data" / "beir-tiny"

CANDIDATES = [{"name": "int8-vectors", "vectors": {"quantize": "int8"}}]
GATES = [recipes.gate("nDCG@10", "qrels", max_drop="50%")]


def recipe_data(folder: Path, *, candidates: list[dict[str, Any]] | None = None,
                gates: list[dict[str, Any]] | None = None, out: Path | None = None,
                cache: Path | None = None) -> dict[str, Any]:
    """The fault suite's recipe: int8 vectors gated at a 50% drop unless told otherwise."""
    return recipes.recipe(
        "faults", datasets=[{"name": "tiny", "source": "beir", "path": str(TINY),
                             "split": "test"}],
        cache=cache or folder / "cache", output=out or folder / "out", cache_chunk=2,
        candidates=CANDIDATES if candidates is None else candidates,
        metrics=["nDCG@10", "R@100"], reference_metrics=["overlap@10", "cosine"],
        gates=GATES if gates is None else gates, resamples=200, parity={"enabled": False})


def write_recipe(folder: Path, *, name: str = "recipe.yaml", **options: Any) -> Path:
    """``recipe_data(folder, **options)`` written to ``folder / name``."""
    return recipes.write(folder / name, recipe_data(folder, **options))


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
    from evalq.app.cli import main

    previous = signal.getsignal(signal.SIGTERM)
    try:
        code = main(list(argv))
    finally:
        signal.signal(signal.SIGTERM, previous)
    captured = capsys.readouterr()
    return Outcome(code, captured.err, captured.out, folder or Path("."))


def no_traceback(text: str) -> bool:
    return "Traceback (most recent call last)" not in text


class CannedServer(LoopbackServer):
    """A deliberately misbehaving ``/v1/embeddings`` server: ``reply(inputs)`` returns
    ``(status, body_text, headers)``. No real server misbehaves on demand, so the faults a
    broken deployment produces are served from here; ``/v1/models`` reports ``models``."""

    def __init__(self, reply: Any, models: Any = None) -> None:
        outer = self
        self.reply, self.models, self.seen = reply, models, []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _write(self, status: int, text: str, headers: dict[str, str]) -> None:
                body = text.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                self._write(200, json.dumps(outer.models or {"data": []}), {})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                payload = json.loads(self.rfile.read(length))
                outer.seen.append((dict(self.headers), payload))
                status, text, headers = outer.reply(payload["input"], dict(self.headers))
                self._write(status, text, headers)

        super().__init__(Handler)


def text_vector(text: str, dim: int = 384, version: int = 0) -> list[float]:
    """A deterministic unit vector per text (and per server "deployment" version)."""
    import hashlib

    import numpy as np

    seed = int.from_bytes(hashlib.sha256(f"{version}|{text}".encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(dim)
    return (v / np.linalg.norm(v)).tolist()
