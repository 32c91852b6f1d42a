"""GPU check of a decoder embedder: Qwen3-Embedding-0.6B's shape through evalq in-process,
sentence-transformers and vLLM's pooling runner; ``bench/gpu_encode.py --decoder`` runs it.

The lent GPU machine cannot fetch Qwen3-Embedding-0.6B, so the model is the fixture
decoder (:mod:`evalq.engines.decoder_fixture`) built there with the real model's shape
(28 layers, hidden 1024, 16 query / 8 key-value heads of 128, intermediate 3072) and
seeded weights, and MiniLM's WordPiece vocabulary from ``.gpu-carry`` (30k tokens against
Qwen's 151k: the embedding table is smaller, the layers that cost the time are the same).
So the throughput figures are the real model's; the fidelity figures compare engines on the
same weights (agreement, not retrieval quality). For each dtype it prints and records:

- texts/s and tokens/s of evalq's ``encode_texts`` and of sentence-transformers'
  ``encode`` (the peer, same texts, same device), and their ratio;
- per-text cosine of every dtype to the fp32 in-process vectors, and evalq against
  sentence-transformers at the same dtype (the oracle for last-token pooling, left padding,
  the tokenizer's EOS and the query instruction);
- vLLM (only where ``import vllm`` works: the workplace's GPU image has no vLLM and its
  wheels exceed what a call can carry, so there the record says it was skipped): engine
  start-up, texts/s and per-text cosine to in-process fp32, in bf16 and, on compute
  capability >= 8.9, fp8; and ``dimensions=256`` against evalq's own Matryoshka truncation.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

# Qwen/Qwen3-Embedding-0.6B's config.json (vocabulary aside, see the module docstring).
QWEN3_EMBEDDING_06B = {
    "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
    "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
    "max_position_embeddings": 32768,
}
# Variance-preserving for 28 layers (the fixture's 0.1 would overflow float16).
INIT_STD = 0.02
MAX_LENGTH = 512
DIMS = 256
DTYPES = ("float32", "bfloat16", "float16")
QUERIES = 256


def build(root: Path, tokenizer_source: Path, layers: int | None = None) -> Path:
    from evalq.engines.decoder_fixture import build_decoder_embedder

    began = time.perf_counter()
    shape = {**QWEN3_EMBEDDING_06B, **({"num_hidden_layers": layers} if layers else {})}
    path = build_decoder_embedder(root, source=tokenizer_source, shape=shape,
                                  init_std=INIT_STD, max_seq_length=MAX_LENGTH)
    print(f"decoder: {path.name} ready in {time.perf_counter() - began:.0f} s", flush=True)
    return path


def _settings(path: Path) -> Any:
    import dataclasses

    from evalq.engines.modelinfo import default_settings

    return dataclasses.replace(default_settings(path), max_length=MAX_LENGTH)


def _both(encoder: Any, docs: list[str], queries: list[str]) -> Any:
    import numpy as np

    from evalq.encode.batching import encode_texts

    d = encode_texts(encoder, docs, role="document", cache=None, progress=False,
                     batch_tokens=65536, max_batch=512)
    q = encode_texts(encoder, queries, role="query", cache=None, progress=False,
                     batch_tokens=65536, max_batch=512)
    return np.vstack([d.vectors, q.vectors]), d.stats.tokens + q.stats.tokens


def measure_inprocess(path: Path, docs: list[str], queries: list[str], dtype: str,
                      repeats: int, device: str, timed: Any) -> dict[str, Any]:
    from evalq.engines.inprocess import InProcessEncoder

    encoder = InProcessEncoder(path, settings=_settings(path), dtype=dtype, device=device)
    _both(encoder, docs[:32], queries[:8])  # warm-up
    seconds, (vectors, tokens), peak = timed(lambda: _both(encoder, docs, queries), repeats,
                                             device)
    encoder.close()
    return {"seconds": seconds, "tokens": tokens, "peak_bytes": peak, "vectors": vectors}


def measure_st(path: Path, docs: list[str], queries: list[str], dtype: str, repeats: int,
               device: str, timed: Any) -> dict[str, Any]:
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), device=device)
    model.to(getattr(torch, dtype))
    model.max_seq_length = MAX_LENGTH

    def run() -> Any:
        d = model.encode(docs, batch_size=64, convert_to_numpy=True, show_progress_bar=False)
        q = model.encode(queries, batch_size=64, prompt_name="query", convert_to_numpy=True,
                         show_progress_bar=False)
        return np.vstack([d, q]).astype(np.float32)

    model.encode(docs[:32], batch_size=32)
    seconds, vectors, peak = timed(run, repeats, device)
    model.to("cpu")
    return {"seconds": seconds, "peak_bytes": peak, "vectors": vectors}


def measure_vllm(path: Path, docs: list[str], queries: list[str], reference: Any,
                 cosines: Any) -> dict[str, Any]:
    """bf16 (and fp8 where the GPU has it; float32 on a CPU try) through the vLLM engine,
    one engine at a time."""
    try:
        import vllm
    except ImportError as exc:
        return {"skipped": f"vllm is not importable here ({exc}); the workplace's GPU image "
                           "has none and its wheels exceed what one call can carry"}
    import torch

    out: dict[str, Any] = {"version": vllm.__version__}
    runs = [("bfloat16" if torch.cuda.is_available() else "float32", None)]  # CPU: a try
    if torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9):
        runs.append(("bfloat16", "fp8"))
    for dtype, quantization in runs:
        label = f"{dtype}{'+' + quantization if quantization else ''}"
        try:  # one engine failing must not lose the figures measured before it
            out[label] = _vllm_run(path, docs, queries, reference, cosines, dtype,
                                   quantization)
        except Exception as exc:
            out[label] = {"error": f"{type(exc).__name__}: {exc}"[:2000]}
            print(f"  vllm {label:>15}: failed: {out[label]['error'][:300]}", flush=True)
            continue
        row = out[label]
        print(f"  vllm {label:>15}: {row['texts_per_s']:9.0f} texts/s, start-up "
              f"{row['startup_s']:.0f} s, cos to in-process fp32 min "
              f"{row['cosine_to_inprocess_fp32']['min']:.6f}", flush=True)
    return out


def _vllm_run(path: Path, docs: list[str], queries: list[str], reference: Any,
              cosines: Any, dtype: str, quantization: str | None) -> dict[str, Any]:
    import torch

    from evalq.encode.matryoshka import truncate
    from evalq.engines.vllm_engine import VllmEngineEncoder

    engine = VllmEngineEncoder(path, settings=_settings(path), dtype=dtype,
                               quantization=quantization, gpu_memory_utilization=0.3,
                               max_model_len=MAX_LENGTH,
                               extra_engine_args={"hf_overrides": {"is_matryoshka": True}})
    try:
        began = time.perf_counter()
        vectors, tokens = _both(engine, docs, queries)
        seconds = time.perf_counter() - began
        row = {"startup_s": engine.startup_s, "texts_per_s": len(vectors) / seconds,
               "tokens_per_s": tokens / seconds,
               "cosine_to_inprocess_fp32": cosines(vectors, reference)}
        if quantization is None:  # vLLM's `dimensions` against evalq's truncation
            nd, nq = min(512, len(docs)), min(64, len(queries))
            engine.dimensions = DIMS
            narrow, _ = _both(engine, docs[:nd], queries[:nq])
            engine.dimensions = None
            want = truncate(_head(reference, len(docs), nd, nq), DIMS)
            row[f"dims{DIMS}_cosine_to_truncated_fp32"] = cosines(narrow, want)
        return row
    finally:
        engine.close()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _head(vectors: Any, n_docs: int, docs: int, queries: int) -> Any:
    """The first ``docs`` document rows and first ``queries`` query rows of a stacked
    documents-then-queries matrix."""
    import numpy as np

    return np.vstack([vectors[:docs], vectors[n_docs:n_docs + queries]])


def check_decoder(texts: list[str], vocabulary: Path, *, repeats: int, device: str,
                  timed: Any, cosines: Any, root: Path, layers: int | None = None,
                  queries: int | None = None) -> dict[str, Any]:
    """Every figure of the module docstring, as one JSON-able mapping. ``vocabulary``: the
    folder whose tokenizer.json the fixture's tokenizer is built from; ``layers`` and
    ``queries`` cut the work for a try without a GPU."""
    from evalq.data.pydocs import load_pydocs

    path = build(root, vocabulary, layers)
    queries_texts = list(load_pydocs().queries.texts)[:min(QUERIES, queries or QUERIES)]
    return _measure(path, texts, queries_texts, repeats, device, timed, cosines, layers)


def _measure(path: Path, texts: list[str], queries: list[str], repeats: int, device: str,
             timed: Any, cosines: Any, layers: int | None) -> dict[str, Any]:
    shape = {**QWEN3_EMBEDDING_06B, **({"num_hidden_layers": layers} if layers else {})}
    figures: dict[str, Any] = {"model": "Qwen3-Embedding-0.6B shape, seeded weights",
                               "shape": shape, "max_length": MAX_LENGTH,
                               "documents": len(texts), "queries": len(queries), "dtypes": {}}
    reference = None
    for dtype in DTYPES:
        ours = measure_inprocess(path, texts, queries, dtype, repeats, device, timed)
        peer = measure_st(path, texts, queries, dtype, repeats, device, timed)
        if reference is None:
            reference = ours["vectors"]
        n = len(ours["vectors"])
        row = {"evalq_texts_per_s": n / ours["seconds"],
               "evalq_tokens_per_s": ours["tokens"] / ours["seconds"],
               "st_texts_per_s": n / peer["seconds"],
               "ratio_vs_st": peer["seconds"] / ours["seconds"],
               "evalq_peak_gib": ours["peak_bytes"] / 2**30,
               "st_peak_gib": peer["peak_bytes"] / 2**30,
               "cosine_to_fp32": cosines(ours["vectors"], reference),
               "cosine_to_st_same_dtype": cosines(ours["vectors"], peer["vectors"])}
        figures["dtypes"][dtype] = row
        print(f"  decoder {dtype:>9}: evalq {row['evalq_texts_per_s']:8.0f} texts/s "
              f"({row['ratio_vs_st']:.2f}x sentence-transformers), cos to fp32 min "
              f"{row['cosine_to_fp32']['min']:.6f}, to ST same dtype min "
              f"{row['cosine_to_st_same_dtype']['min']:.6f}", flush=True)
    figures["vllm"] = measure_vllm(path, texts, queries, reference, cosines)
    return figures
