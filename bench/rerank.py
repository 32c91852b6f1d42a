"""Reranker throughput, each against a peer measured in the same run.

1. In-process: evalq's ``score_pairs`` (pairs sorted by length and packed to a token
   budget) vs sentence-transformers' ``CrossEncoder.predict`` (batch 32; version 6 sorts
   pairs by length too) on the same (query, document) pairs of pydocs — a BM25 top-N,
   the shape a pipeline scores — with the fixture cross-encoder (MiniLM encoder + seeded
   head), fp32, CPU.
   Target: >= 1.2x. The scores must agree (max |Δ| printed), or the speed means nothing.
2. vLLM engine (``--vllm``): evalq's ``VllmEngineReranker`` through ``score_pairs`` vs a
   raw ``LLM.score`` call on the same pairs with the same engine. Target overhead <= 5%.

Timings are best-of-``repeats`` with the contenders interleaved, because a shared CI
machine's load changes within a minute; CPU seconds (``time.process_time``) are printed
beside wall time.

Run: ``HF_HUB_OFFLINE=1 .venv/bin/python bench/rerank.py [--queries 40] [--depth 20]
[--repeats 3] [--vllm]``.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from record import write_record

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def bm25_pairs(queries: int, depth: int) -> tuple[list[str], list[str]]:
    from evalq.data.pydocs import load_pydocs
    from evalq.retrieve.firststage import Bm25Options, bm25

    ds = load_pydocs()
    texts = ds.corpus.texts_for_encoding()
    qtexts = list(ds.queries.texts[:queries])
    run = bm25(texts, ds.corpus.ids, qtexts, ds.queries.ids[:queries], Bm25Options(), depth)
    qs, docs = [], []
    for row in range(len(qtexts)):
        for i in run.ranking.indices[row]:
            if i >= 0:
                qs.append(qtexts[row])
                docs.append(texts[i])
    return qs, docs


def timed(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def bench_inprocess(model: Path, qs: list[str], docs: list[str], repeats: int) -> dict:
    from sentence_transformers import CrossEncoder

    from evalq.encode.pairs import score_pairs
    from evalq.engines.reranker import CrossEncoderReranker, RerankSettings

    ours = CrossEncoderReranker(model, settings=RerankSettings())
    peer = CrossEncoder(str(model), max_length=256, device="cpu")
    pairs = list(zip(qs, docs))
    best = {"evalq": (np.inf, 0.0), "st": (np.inf, 0.0)}
    for _ in range(repeats):
        (a, _), wall, cpu = timed(lambda: score_pairs(ours, qs, docs, batch_tokens=2048))
        best["evalq"] = min(best["evalq"], (wall, cpu))
        b, wall, cpu = timed(lambda: peer.predict(pairs, batch_size=32))
        best["st"] = min(best["st"], (wall, cpu))
    n = len(pairs)
    print(f"in-process fp32 cross-encoder, {n} pairs (BM25 top-N of pydocs)")
    for name, (wall, cpu) in best.items():
        print(f"  {name:6s} {n / wall:8.1f} pairs/s  wall {wall:6.2f}s  cpu {cpu:6.2f}s")
    print(f"  ratio evalq / sentence-transformers: {best['st'][0] / best['evalq'][0]:.2f}x "
          f"(target >= 1.2)   max |Δscore| {np.abs(a - b).max():.2e}")
    ours.close()
    return {"pairs": n, "evalq_wall_s": best["evalq"][0], "evalq_cpu_s": best["evalq"][1],
            "st_wall_s": best["st"][0], "st_cpu_s": best["st"][1],
            "max_abs_delta_score": float(np.abs(a - b).max())}


def bench_vllm(model: Path, qs: list[str], docs: list[str], repeats: int) -> dict:
    from vllm.pooling_params import PoolingParams

    from evalq.encode.pairs import score_pairs
    from evalq.engines.reranker import RerankSettings
    from evalq.engines.vllm_rerank import VllmEngineReranker

    engine = VllmEngineReranker(model, settings=RerankSettings(), kind="cross-encoder")
    try:
        llm = engine._llm
        params = PoolingParams(use_activation=True)
        kwargs = {"truncation": "longest_first", "max_length": 256}
        best = {"evalq": np.inf, "raw": np.inf}
        for _ in range(repeats):
            (a, _), wall, _ = timed(lambda: score_pairs(engine, qs, docs, self_batching=True,
                                                        chunk_size=len(qs)))
            best["evalq"] = min(best["evalq"], wall)
            raw, wall, _ = timed(lambda: llm.score(qs, docs, pooling_params=params,
                                                   tokenization_kwargs=kwargs, use_tqdm=False))
            best["raw"] = min(best["raw"], wall)
        b = np.array([o.outputs.score for o in raw])
        n = len(qs)
        print(f"vLLM engine fp32 cross-encoder, {n} pairs")
        for name, wall in best.items():
            print(f"  {name:6s} {n / wall:8.1f} pairs/s  wall {wall:6.2f}s")
        print(f"  evalq overhead vs raw LLM.score: {best['evalq'] / best['raw'] - 1:+.1%} "
              f"(target <= 5%)   max |Δscore| {np.abs(a - b).max():.2e}")
        return {"pairs": n, "evalq_wall_s": best["evalq"], "raw_wall_s": best["raw"],
                "max_abs_delta_score": float(np.abs(a - b).max())}
    finally:
        engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--depth", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vllm", action="store_true")
    args = parser.parse_args()
    from evalq.engines.rerank_fixture import build_minilm_cross_encoder

    model = build_minilm_cross_encoder(Path(tempfile.gettempdir()) / "evalq-bench-models")
    qs, docs = bm25_pairs(args.queries, args.depth)
    figures: dict = {"queries": args.queries, "depth": args.depth, "repeats": args.repeats,
                     "inprocess": bench_inprocess(model, qs, docs, args.repeats)}
    inp = figures["inprocess"]
    ratios = {"evalq / sentence-transformers pairs/s (in-process)":
              inp["st_wall_s"] / inp["evalq_wall_s"],
              "evalq / sentence-transformers pairs per CPU s (in-process)":
              inp["st_cpu_s"] / inp["evalq_cpu_s"]}
    if args.vllm:
        figures["vllm"] = bench_vllm(model, qs, docs, args.repeats)
        ratios["evalq / raw LLM.score wall (vLLM engine)"] = (
            figures["vllm"]["evalq_wall_s"] / figures["vllm"]["raw_wall_s"])
    write_record("rerank", figures=figures, ratios=ratios,
                 peer="sentence-transformers CrossEncoder.predict (batch 32) on the same BM25 "
                      "pairs, fp32 fixture cross-encoder, best of the repeats; with --vllm, raw "
                      "LLM.score on the same engine")


if __name__ == "__main__":
    main()
