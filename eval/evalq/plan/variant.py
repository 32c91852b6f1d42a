"""A variant as the run searches with it: what its engine builds
(:class:`evalq.engines.options.EncoderVariant`) plus the index kind its search builds.

The recipe's ``Variant`` adds the checks that need the backend registry; the plan's
:class:`evalq.plan.types.VariantPlan` carries it as ``options``, so the per-dataset scoring
(``evalq.execute.dataset_scoring``) reads the index from the plan, not the recipe.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, SerializeAsAny, ValidationError, field_validator

from evalq.engines.options import EncoderVariant
from evalq.plan.sides import StoredVectors
from evalq.retrieve.kinds import KindOptions
from evalq.retrieve.registry import DEFAULT_VECTOR_KIND, EXACT_KIND, INDEX_KINDS


class SearchedVariant(EncoderVariant):
    """An encoder variant and the retrieval kind its vectors are searched with."""

    # A registered retrieval kind that indexes vectors (evalq.retrieve.registry), chosen by
    # `kind:` (left out: faiss); unset = exact search only.
    index: SerializeAsAny[KindOptions] | None = Field(
        default=None, description="a registered index kind's options, chosen by `kind:` "
        "(no `kind:` = faiss); see [Index kinds](index-kinds.md)")

    # Borrowed sides (evalq.plan.sides): another variant's vectors, or vectors on disk.
    documents: str | StoredVectors | None = Field(
        default=None, description="take the document vectors from `reference`, an earlier "
        "variant's name, a vector file {path, ids}, a pgvector table {pgvector: {dsn, "
        "table}}, a Qdrant shard {qdrant: {path}} or server {qdrant: {url, collection}}, "
        "instead of encoding them; see "
        "[Keep your index](../keep-index.md)")
    queries: str | StoredVectors | None = Field(
        default=None, description="take the query vectors from `reference`, an earlier "
        "variant's name or a vector file {path, ids} (read by query id) instead of "
        "encoding them; see [Keep your index](../keep-index.md)")

    @field_validator("documents", "queries", mode="before")
    @classmethod
    def _stored_vectors(cls, value: Any) -> Any:
        """A mapping is stored vectors: validated here, so a wrong one is refused with
        its own reason (not the union's "should be a valid string")."""
        if not isinstance(value, dict):
            return value
        try:
            return StoredVectors.model_validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            at = ".".join(str(p) for p in first["loc"])
            raise ValueError((f"{at}: " if at else "")
                             + first["msg"].removeprefix("Value error, ")) from None

    @field_validator("index", mode="before")
    @classmethod
    def _registered_index_kind(cls, value: Any) -> Any:
        return None if value is None else INDEX_KINDS.parse(value, "vectors",
                                                            DEFAULT_VECTOR_KIND)

    @property
    def searches_index(self) -> bool:
        """Whether the variant is judged on an index kind other than exact search (whose
        run is then the baseline its index loss is measured against)."""
        return self.index is not None and self.index.kind != EXACT_KIND
