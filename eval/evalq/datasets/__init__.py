"""Dataset sources (BEIR folders, TREC files, Hugging Face ``datasets``, the built-in
``pydocs`` corpus), all producing :class:`~evalq.datasets.types.Dataset`."""

from evalq.datasets.types import Corpus, Dataset, Qrels, Queries

__all__ = ["Corpus", "Dataset", "Qrels", "Queries"]
