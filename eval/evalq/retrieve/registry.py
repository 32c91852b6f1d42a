"""The registry of retrieval kinds: the one place their names come from.

The recipe's ``index:`` section, the plan's checks, the run and the docs' generated
"Index kinds" page read :data:`INDEX_KINDS`; a new kind is its module plus one line in
the tuple below (docs/development/architecture.md, "Adding an index kind").
"""

from __future__ import annotations

from evalq.retrieve import ann, exact, firststage, pgvector_kind, qdrant_kind
from evalq.retrieve.kinds import KindRegistry, KindSpec

INDEX_KINDS = KindRegistry()

for _kind in (exact.KIND, ann.KIND, firststage.KIND, pgvector_kind.KIND,
              qdrant_kind.KIND):
    INDEX_KINDS.register(_kind)

# An ``index:`` mapping without ``kind:`` is a FAISS factory index (what ``index:`` meant
# before there were kinds, so older recipes read the same).
DEFAULT_VECTOR_KIND = ann.KIND.name
EXACT_KIND = exact.KIND.name


def register_index_kind(spec: KindSpec) -> KindSpec:
    """Add a kind (a plug-in's, a test's); a second registration of a name is refused."""
    return INDEX_KINDS.register(spec)
