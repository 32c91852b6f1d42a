"""evalq: is a quantized embedding model or reranker safe to deploy?

The package is import-light on purpose: heavy libraries (torch, vllm, faiss,
bitsandbytes) are imported inside the modules that use them, so ``evalq --help``
stays fast and a missing extra gives an install hint instead of a traceback.
"""

__version__ = "0.1.0"
