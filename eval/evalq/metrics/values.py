"""Per-query values: what every measure produces, so any two variants can be paired.

The type lives in :mod:`evalq.core`; it is re-exported here for existing imports."""

from evalq.core import PerQuery

__all__ = ["PerQuery"]
