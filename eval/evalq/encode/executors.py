"""Which executor a run uses: the recipe's ``executor:``, overridden by the command line.

Kept apart from the runner so the runner only asks for an executor and hands it work.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from evalq.core.errors import InputError
from evalq.encode.cache import EmbeddingCache
from evalq.encode.options import ExecutorSpec
from evalq.encode.rayaddress import FORMS, address_problem, unreachable
from evalq.encode.rayexec import RayExecutor, stats_dict


class RunExecutor:
    """The Ray executor as the runner uses it: one cluster connection per run."""

    def __init__(self, spec: Any) -> None:
        self._ray = RayExecutor(spec)

    def __enter__(self) -> RunExecutor:
        self._ray.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._ray.__exit__(*exc)

    def describe(self) -> dict[str, Any]:
        return {"type": "ray", **self._ray.describe()}

    def private_cache(self, run_dir: Path) -> Any:
        """``--no-cache`` with Ray: chunks travel through a fresh cache inside the run
        folder (emptied first, so nothing earlier is reused)."""

        root = run_dir / "ray-handover"
        shutil.rmtree(root, ignore_errors=True)
        return EmbeddingCache(root)

    def encode_variant(self, variant: Any, ctx: Any, encoder: Any, work: list[Any],
                       options: dict[str, Any]) -> dict[str, Any]:
        cache = options["cache"]
        chunk_opts = {k: v for k, v in options.items() if k != "cache"}
        stats = self._ray.encode_missing(variant, ctx, encoder, work, options=chunk_opts,
                                         cache=cache)
        return stats_dict(stats)


def open_executor(spec: ExecutorSpec, recipe_path: Path, executor: str | None,
                  address: str | None) -> RunExecutor | None:
    """``None`` for the local executor; a :class:`RunExecutor` (not yet connected) for Ray.
    ``spec`` is the recipe's ``executor:``; ``executor`` and ``address`` (the command line)
    override it. Refuses Ray when it is not installed (exit 2 with the install line)."""
    if executor is not None:
        if executor not in ("local", "ray"):
            raise InputError(message=f"unknown executor '{executor}'", field="--executor",
                             fix="use local or ray")
        spec = spec.model_copy(update={"type": executor})
    if address is not None:
        if spec.type != "ray":
            raise InputError(message="--address names a Ray cluster, but the executor is "
                             "local", field="--address", fix="add --executor ray")
        problem = address_problem(address)
        if problem:
            raise InputError(message=problem, field="--address", fix=f"use {FORMS}")
        spec = spec.model_copy(update={"address": address})
    if spec.type == "local":
        return None
    try:
        runner = RunExecutor(spec)  # Ray not installed: exit 2 with the install line
    except InputError as exc:
        exc.file = recipe_path
        raise
    down = unreachable(spec.address) if spec.address else None
    if down:
        raise InputError(message=down, file=None if address else recipe_path,
                         field="--address" if address else "executor.address",
                         fix="start the cluster (ray start --head) or correct the address; "
                         "check a firewall between here and it")
    return runner
