"""The counts of one ``encode_texts`` call, in one definition for both sides of the run.

:mod:`evalq.encode.batching` fills them while it encodes, and a dataset entry's
``encode`` section of ``summary.json`` stores them as they are
(:class:`evalq.results.parts.EncodeSection`). The two parts sit on one level and may not
import each other, so the one type lives here. It is a closed pydantic model like every
part of a results file (unknown key refused, strict numbers, frozen), because the summary
validates it on write and on read; the encoder builds it once per call, so the
validation costs nothing that shows.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class EncodeStats(BaseModel):
    """Counts and throughput of one ``encode_texts`` call.

    ``texts`` and ``tokens`` cover every input text; ``n_cached + n_computed`` equals
    ``n_unique`` (duplicates are embedded once). Rates cover the computed texts only and
    are ``None`` when nothing was computed (a fully cached call has no throughput).
    ``padded_tokens`` is the token slots the computed batches occupied, so
    ``tokens_computed / padded_tokens`` is the packing efficiency.
    """

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    texts: int
    tokens: int
    seconds_computing: float
    texts_per_s: float | None
    tokens_per_s: float | None
    n_cached: int
    n_computed: int
    chunks_cached: int
    chunks_computed: int
    n_unique: int
    tokens_computed: int
    padded_tokens: int
    batches: int


__all__ = ["EncodeStats"]
