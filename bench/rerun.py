"""Cache-warm rerun: a second `evalq run` of the same recipe as a share of the first.

The first run encodes every variant; the second must find every embedding chunk in the
cache and only redo search, metrics and statistics (target <= 0.3 of the first). Both
runs use a fresh cache folder made for this benchmark, so the first run is truly cold.

Run: ``.venv/bin/python bench/rerun.py [recipes/quickstart.yaml] [--max-queries N]
[--max-docs N]``.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import yaml

from record import write_record


@dataclass(frozen=True)
class Timed:
    """One ``evalq run``: wall seconds, the child's CPU seconds (user + system) and its
    kernel peak RSS, read from ``wait4`` so that nothing samples the child."""

    wall_s: float
    cpu_s: float
    peak_rss_mib: float
    exit_code: int


def _run(recipe: Path, out: Path, extra: list[str]) -> Timed:
    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "evalq.app.cli", "run", str(recipe), "-o", str(out), *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert child.stderr is not None
    stderr = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - start
    if child.returncode not in (0, 1):  # 1 = a gate failed, which is a finding
        sys.exit(f"evalq run failed ({child.returncode}):\n{stderr[-3000:]}")
    return Timed(seconds, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024,
                 child.returncode)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("recipe", nargs="?", default="recipes/quickstart.yaml")
    parser.add_argument("--max-queries", type=int)
    parser.add_argument("--max-docs", type=int)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    extra = []
    if args.max_queries:
        extra += ["--max-queries", str(args.max_queries)]
    if args.max_docs:
        extra += ["--max-docs", str(args.max_docs)]
    with tempfile.TemporaryDirectory(prefix="evalq-rerun-") as tmp:
        from evalq.core.locations import resolve_recipe

        args.recipe = str(resolve_recipe(args.recipe))  # a path, or a built-in recipe name
        data = yaml.safe_load(Path(args.recipe).read_text())
        data["cache_dir"] = str(Path(tmp) / "cache")
        data.pop("output", None)
        if "include" in data:  # keep includes resolvable from the temporary copy
            includes = data["include"] if isinstance(data["include"], list) else [data["include"]]
            data["include"] = [str(Path(args.recipe).resolve().parent / i) for i in includes]
        recipe = Path(tmp) / Path(args.recipe).name
        recipe.write_text(yaml.safe_dump(data))
        cold = _run(recipe, Path(tmp) / "cold", extra)
        warm = _run(recipe, Path(tmp) / "warm", extra)
    print(f"recipe {args.recipe}: cold run {cold.wall_s:.1f} s wall ({cold.cpu_s:.0f} CPU s, "
          f"peak RSS {cold.peak_rss_mib:.0f} MiB, exit {cold.exit_code}), warm rerun "
          f"{warm.wall_s:.1f} s ({warm.cpu_s:.0f} CPU s), warm/cold = "
          f"{warm.wall_s / cold.wall_s:.2f} (target <= 0.30)")
    write_record("rerun", figures={"recipe": args.recipe, "max_queries": args.max_queries,
                                   "max_docs": args.max_docs, "cold_s": cold.wall_s,
                                   "warm_s": warm.wall_s, "cold": asdict(cold),
                                   "warm": asdict(warm)},
                 ratios={"warm / cold": warm.wall_s / cold.wall_s,
                         "warm / cold (CPU s)": warm.cpu_s / cold.cpu_s},
                 peer="the cold run of the same recipe (fresh cache folder) in the same "
                      "invocation; target <= 0.30")

if __name__ == "__main__":
    main()
