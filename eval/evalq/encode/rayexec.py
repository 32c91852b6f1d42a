"""``executor: ray``: encode a run's missing embedding-cache chunks on a Ray cluster.

The unit of distributed work is the embedding cache's chunk, keyed exactly as
:func:`evalq.encode.batching.encode_texts` keys it (same prefixing, de-duplication, length order,
chunk size and :func:`evalq.encode.batching.chunk_key`). The driver plans the chunks of every
text list a variant will encode (parity sample, each dataset's documents and queries),
skips the chunks already in the cache, and sends the rest through Ray Data
``map_batches`` to an actor pool: ``replicas`` actors, each building the variant's
encoder once (one model replica on its CPU/GPU slots) and encoding a chunk with
``encode_texts`` itself, so the batches — and therefore the vectors — are those a local
run computes. The driver writes each returned chunk into the cache as it arrives (Ray
Data streams results with back-pressure, so at most a few chunks are in flight), and the
runner then calls ``encode_texts`` as usual: every chunk is a cache hit.

Consequences: a local run and a Ray run share the cache (either resumes the other), an
interrupted Ray run keeps every chunk that reached the driver, and a cluster needs no
shared filesystem. A killed actor is restarted by Ray (``max_restarts``) and its chunk
retried (``max_task_retries``); nothing of ours re-implements that.

The driver holds one encoder too (token lengths and the cache fingerprint need the
tokenizer and the weights' identity). Backends that start an engine (``vllm``) would
start one on the driver as well, so they are refused here for now with a clear message;
the in-process and HTTP backends (a client pool per actor) are supported.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from evalq.core.errors import InputError
from evalq.encode.batching import chunk_key, composition_key, encode_texts, length_order
from evalq.encode.options import ExecutorSpec
from evalq.engines.factory import create_encoder
from evalq.engines.registry import BACKENDS, embedding_backend

INSTALL = "pip install 'evalq[ray]'"


def require_ray() -> None:
    """Exit 2 with the install line when Ray (with Ray Data) is not importable."""
    try:
        import ray
        import ray.data  # noqa: F401
    except ImportError:
        raise InputError(
            message="executor 'ray' needs the Python package 'ray[data]', which is not "
                    "installed",
            field="executor",
            fix=f"{INSTALL} (or run with the local executor)",
        ) from None


@dataclass(frozen=True)
class ChunkJob:
    """One cache chunk to compute: its key and its texts (before the role prefix)."""

    key: str
    role: str
    texts: tuple[str, ...]


@dataclass(frozen=True)
class RayEncodeStats:
    chunks_planned: int
    chunks_cached: int
    chunks_computed: int
    texts_computed: int
    seconds: float
    actor_restarts: int


def plan_chunks(
    encoder: Any, texts: Sequence[str], role: str, chunk_size: int, cache: Any,
    options: dict[str, Any] | None = None,
) -> tuple[list[ChunkJob], int]:
    """The chunks ``encode_texts(encoder, texts, role=role, chunk_size=chunk_size,
    **options)`` would look up, minus those ``cache`` holds; returns (missing jobs, chunks
    planned). ``options`` matter for batch-dependent encoders, whose keys carry the
    batching (:func:`evalq.encode.batching.composition_key`)."""

    settings = encoder.settings
    prefix = settings.query_prefix if role == "query" else settings.document_prefix
    unique = list(dict.fromkeys(prefix + t for t in texts))
    if not unique:
        return [], 0
    lengths = [int(x) for x in encoder.token_lengths(unique)]
    order = length_order(unique, lengths)
    encoder_fp, settings_fp = encoder.fingerprint(), settings.fingerprint()
    opts = options or {}
    composition = composition_key(  # encode_texts' own defaults where options are silent
        opts.get("composition"), batch_tokens=opts.get("batch_tokens", 8192),
        max_batch=opts.get("max_batch", 256), length_sorted=opts.get("length_sorted", True))
    jobs, planned = [], 0
    for start in range(0, len(order), chunk_size):
        chunk = [unique[i] for i in order[start : start + chunk_size]]
        planned += 1
        key = chunk_key(encoder_fp, settings_fp, role, prefix, chunk,  # type: ignore[arg-type]
                        composition)
        if cache is not None and key in cache:
            continue
        jobs.append(ChunkJob(key, role, tuple(t[len(prefix):] for t in chunk)))
    return jobs, planned


class _EncodeActor:
    """One model replica; encodes whole cache chunks exactly as a local run would."""

    def __init__(self, variant: Any, ctx: Any, options: dict[str, Any]) -> None:
        self.encoder = create_encoder(variant, ctx)
        self.options = options
        self.pid = os.getpid()

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        out_vectors, out_shapes = [], []
        for role, texts_json in zip(batch["role"], batch["texts"]):
            texts = json.loads(str(texts_json))
            vectors = encode_texts(self.encoder, texts, role=str(role), cache=None,
                                   progress=False, chunk_size=max(1, len(texts)),
                                   **self.options).vectors
            out_vectors.append(np.ascontiguousarray(vectors, dtype=np.float32).tobytes())
            out_shapes.append(json.dumps(list(vectors.shape)))
        return {"key": batch["key"], "vectors": np.array(out_vectors, dtype=object),
                "shape": np.array(out_shapes, dtype=object),
                "pid": np.full(len(out_shapes), self.pid)}

    def __del__(self) -> None:
        encoder = getattr(self, "encoder", None)
        if encoder is not None:
            encoder.close()


class RayExecutor:
    """Connects to (or starts) a Ray cluster once per run; encodes variants' chunks."""

    def __init__(self, spec: ExecutorSpec) -> None:
        require_ray()
        self.spec = spec
        self._started_here = False

    def __enter__(self) -> RayExecutor:
        import ray

        if not ray.is_initialized():
            env = {k: v for k, v in os.environ.items()
                   if k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE",
                            "TOKENIZERS_PARALLELISM", "PYTHONPATH", "VLLM_CPU_KVCACHE_SPACE")}
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                      "runtime_env": {"env_vars": env}}
            if self.spec.address:
                ray.init(address=self.spec.address, **kwargs)
            else:
                ray.init(num_cpus=self.spec.num_cpus, **kwargs)
            self._started_here = True
        return self

    def __exit__(self, *exc: object) -> None:
        import ray

        if self._started_here:
            ray.shutdown()

    def describe(self) -> dict[str, Any]:
        """The manifest's ``executor`` entry: the spec and what the cluster is."""
        import ray

        nodes = [{"node_id": n.get("NodeID"), "alive": n.get("Alive"),
                  "address": n.get("NodeManagerAddress"), "resources": n.get("Resources")}
                 for n in ray.nodes()]
        return {**self.spec.model_dump(), "ray_version": ray.__version__,
                "nodes": nodes, "cluster_resources": ray.cluster_resources()}

    def encode_missing(
        self, variant: Any, ctx: Any, encoder: Any, work: Sequence[tuple[Sequence[str], str]],
        *, options: dict[str, Any], cache: Any,
    ) -> RayEncodeStats:
        """Fill ``cache`` with every chunk of ``work`` ((texts, role) lists) that it lacks."""
        import ray
        import ray.data

        if not embedding_backend(variant.backend).ray:
            raise InputError(
                message=f"executor 'ray' does not run backend '{variant.backend}' yet "
                        "(its engine would also start on the driver)",
                field=f"variant '{variant.name}'.backend",
                fix=f"use one of {', '.join(BACKENDS.names('embedding', lambda s: s.ray))} "
                    "with executor ray, or the local executor",
            )
        chunk_size = options["chunk_size"]
        jobs: list[ChunkJob] = []
        planned = 0
        seen: set[str] = set()
        for texts, role in work:
            missing, n = plan_chunks(encoder, texts, role, chunk_size, cache, options)
            planned += n
            for job in missing:
                if job.key not in seen:  # the same chunk may come up twice (parity sample)
                    seen.add(job.key)
                    jobs.append(job)
        began = time.perf_counter()
        pids: set[int] = set()
        computed_texts = 0
        if jobs:
            actor_options = {k: options[k] for k in ("batch_tokens", "max_batch",
                                                     "length_sorted")}
            items = [{"key": j.key, "role": j.role, "texts": json.dumps(list(j.texts))}
                     for j in jobs]
            data = ray.data.from_items(items, override_num_blocks=len(items))
            result = data.map_batches(
                _EncodeActor,
                fn_constructor_kwargs={"variant": variant, "ctx": ctx,
                                       "options": actor_options},
                batch_size=self.spec.batch_size,
                concurrency=self.spec.replicas,
                num_cpus=self.spec.cpus_per_replica,
                num_gpus=self.spec.gpus_per_replica or None,
                max_restarts=self.spec.max_restarts,
                max_task_retries=self.spec.max_restarts,
            )
            for row in result.iter_rows():
                shape = tuple(json.loads(row["shape"]))
                vectors = np.frombuffer(row["vectors"], dtype=np.float32).reshape(shape)
                cache.put(str(row["key"]), vectors)
                computed_texts += shape[0]
                pids.add(int(row["pid"]))
        return RayEncodeStats(
            chunks_planned=planned, chunks_cached=planned - len(jobs),
            chunks_computed=len(jobs), texts_computed=computed_texts,
            seconds=time.perf_counter() - began,
            actor_restarts=max(0, len(pids) - self.spec.replicas),
        )


def stats_dict(stats: RayEncodeStats) -> dict[str, Any]:
    return asdict(stats)
