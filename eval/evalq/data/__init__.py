"""Dataset sources (BEIR folders, TREC files, Hugging Face ``datasets``, the built-in
``pydocs`` corpus), all producing :class:`~evalq.core.dataset.Dataset`; manifests,
slicing, streamed corpora and vector shards on disk.

The parts, their layers and the rules between them: docs/development/architecture.md
(checked by ``make lint``).
"""

from evalq.core.dataset import Corpus, Dataset, Qrels, Queries

__all__ = ["Corpus", "Dataset", "Qrels", "Queries"]
