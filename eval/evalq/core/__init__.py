"""Value types and protocols every part shares, errors, atomic writes, locations, the
weights fingerprint, the strict options base; imports nothing else of evalq.

The parts, their layers and the rules between them: docs/development/architecture.md
(checked by ``make lint``).
"""
