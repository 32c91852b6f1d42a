"""Dataset sources (BEIR folders, TREC files, Hugging Face ``datasets``, the built-in
``pydocs`` corpus), all producing :class:`~evalq.core.dataset.Dataset`."""

from evalq.core.dataset import Corpus, Dataset, Qrels, Queries

__all__ = ["Corpus", "Dataset", "Qrels", "Queries"]
