"""Every measure family, registered: import this module to parse any measure string.

Importing the owning modules registers their families (``judged`` for qrels measures,
``reference`` for measures against the reference run) and their compute functions.
"""

from evalq.measure import fidelity, judged, reference  # noqa: F401  (import registers the families)
from evalq.measure.measures import FAMILIES, Measure, parse_measure, parse_measures

__all__ = ["FAMILIES", "Measure", "parse_measure", "parse_measures"]
