"""evalq: is a quantized embedding model or reranker safe to deploy?

The package is import-light on purpose: heavy libraries (torch, vllm, faiss,
bitsandbytes) are imported inside the modules that use them, so ``evalq --help``
stays fast and a missing extra gives an install hint instead of a traceback.

The Python API (``evalq.run``, ``evalq.load_results``, ``evalq.Results``) lives in
:mod:`evalq.app.api` and is imported on first use, so ``import evalq`` stays light too.
"""

from __future__ import annotations

from typing import Any

from evalq.core.version import __version__

__all__ = ["Results", "__version__", "load_results", "run"]

_API = ("run", "load_results", "Results")


def __getattr__(name: str) -> Any:
    if name in _API:
        from evalq.app import api

        return getattr(api, name)
    raise AttributeError(f"module 'evalq' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
