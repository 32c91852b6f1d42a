"""Serving formats at their quality verdicts: `evalq run` then `evalq load` on one recipe.

The default recipe, ``recipes/load-onnx.yaml``, serves MiniLM three ways through Infinity
on this CPU: its torch engine (fp32), and its optimum engine running evalq's own ONNX
graphs, fp32 and ONNX Runtime dynamic int8 (``onnx_from``: the very graphs the in-process
``onnx`` variants were judged on). One run of each command, in that order, into one
folder, so the load test's decision table carries the verdicts of the same run.

Printed and recorded per served variant: its quality verdict and parity cosine, the
query knee (req/s under the p99 SLO), the ingest knee (texts/s), the server's peak RSS,
the replicas and $ per 1M queries the capacity plan asks for; ratios are each variant's
knees over the peer's, Infinity's torch engine, measured in the same run.

    HF_HUB_OFFLINE=1 nice -n 10 .venv/bin/python bench/load_formats.py
        [--recipe recipes/load-onnx.yaml] [--peer infinity-fp32] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from record import host, write_record

ROOT = Path(__file__).resolve().parents[1]


def _evalq(*args: str) -> tuple[int, float]:
    """One evalq command in a child (as a user runs it); its exit code and wall seconds."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "eval"), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    started = time.perf_counter()
    code = subprocess.call([sys.executable, "-c", "from evalq.app.cli import main; "
                            "raise SystemExit(main())", *args], cwd=ROOT, env=env)
    return code, time.perf_counter() - started


def _server_versions(venv: Path) -> dict[str, str | None]:
    """The serving venv's own versions (Infinity's pins differ from evalq's venv)."""
    code = ("import json; from importlib import metadata as m\n"
            "def v(n):\n try: return m.version(n)\n except m.PackageNotFoundError: return None\n"
            "print(json.dumps({n: v(n) for n in ('infinity-emb', 'optimum', 'optimum-onnx', "
            "'onnxruntime', 'torch', 'transformers', 'sentence-transformers', 'numpy')}))")
    try:
        return json.loads(subprocess.check_output([str(venv / "bin" / "python"), "-c", code]))
    except (OSError, subprocess.CalledProcessError, ValueError):
        return {}


def _figures(out: Path) -> dict[str, Any]:
    load = json.loads((out / "load" / "summary.json").read_text())
    rows = {row["variant"]: row for row in load.get("decision") or []}
    figures: dict[str, Any] = {}
    for name, entry in load["variants"].items():
        knees = entry.get("knees") or {}
        steps = [s for w in entry["workloads"].values() for s in w["steps"]]
        rss = max((s["server"].get("peak_rss_mb") or 0.0 for s in steps), default=None)
        parity = entry.get("parity") or {}
        row = rows.get(name, {})
        figures[name] = {
            "format": row.get("format"),
            "quality": row.get("quality"), "parity_cosine_min": parity.get("cosine_min"),
            "parity_checked": parity.get("checked"),
            "query_knee_rps": (knees.get("query") or {}).get("per_s"),
            "query_knee_lower_bound": (knees.get("query") or {}).get("lower_bound"),
            "ingest_knee_texts_per_s": (knees.get("ingest") or {}).get("per_s"),
            "server_peak_rss_mb": rss, "startup_s": entry.get("startup_s"),
            "replicas": row.get("replicas"),
            "dollars_per_million_queries": row.get("dollars_per_million_queries")}
    return {"variants": figures, "recommendation": load.get("recommendation")}


def _stop_unless_finished(command: str, code: int, out: Path) -> None:
    """A failed command is not a measurement: no figures, no record, a non-zero exit.

    Exit 0 and exit 1 (a gate failed) both finished and wrote their results; 2 (bad input),
    3 (a bug) or a signal did not, and figures read from the folder after them would be
    stale or missing.
    """
    if code not in (0, 1):
        raise SystemExit(f"load_formats: `evalq {command}` exited {code}; no record written "
                         f"(its output is in {out})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="recipes/load-onnx.yaml")
    parser.add_argument("--peer", default="infinity-fp32")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="evalq-load-formats-"))
    before = host()
    run_code, run_s = _evalq("run", args.recipe, "-o", str(out))
    _stop_unless_finished("run", run_code, out)
    load_code, load_s = _evalq("load", args.recipe, "-o", str(out))
    _stop_unless_finished("load", load_code, out)
    figures = _figures(out)
    figures.update({"run_exit": run_code, "run_s": round(run_s, 1), "load_exit": load_code,
                    "load_s": round(load_s, 1), "out": str(out),
                    "loadavg_after": list(os.getloadavg()),
                    "server_versions": _server_versions(ROOT / ".venv-infinity")})
    peer = figures["variants"][args.peer]
    ratios: dict[str, Any] = {}
    for name, v in figures["variants"].items():
        if name == args.peer:
            continue
        ratios[name] = {key: (round(v[key] / peer[key], 3) if v[key] and peer[key] else None)
                        for key in ("query_knee_rps", "ingest_knee_texts_per_s")}
    print(f"{'variant':20s} {'format':22s} {'quality':12s} {'cos min':>9s} {'query knee':>11s} "
          f"{'ingest/s':>9s} {'RSS MiB':>8s} {'$/1M q':>8s}")
    for name, v in figures["variants"].items():
        knee = ("-" if v["query_knee_rps"] is None else
                f"{'>=' if v['query_knee_lower_bound'] else ''}{v['query_knee_rps']:g}")
        cos = "-" if v["parity_cosine_min"] is None else f"{v['parity_cosine_min']:.5f}"
        dollars = v["dollars_per_million_queries"]
        print(f"{name:20s} {v['format'] or '-':22s} {v['quality'] or '-':12s} "
              f"{cos:>9s} {knee:>11s} {v['ingest_knee_texts_per_s'] or 0:9.1f} "
              f"{v['server_peak_rss_mb'] or 0:8.0f} "
              f"{'-' if dollars is None else f'{dollars:.3f}':>8s}")
    for name, r in ratios.items():
        print(f"{name} / {args.peer}: query knee {r['query_knee_rps']}x, ingest "
              f"{r['ingest_knee_texts_per_s']}x")
    write_record("load_formats", figures=figures, ratios=ratios, host_info=before,
                 peer=f"{args.peer} (Infinity's torch engine, fp32) in the same load run, "
                      "same workloads and SLOs",
                 notes=f"recipe {args.recipe}; evalq run then evalq load into one folder")


if __name__ == "__main__":
    main()
