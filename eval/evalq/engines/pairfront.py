"""The text side every local cross-encoder shares: how a (query, document) pair is tokenized.

The in-process cross-encoder, the ONNX Runtime and the OpenVINO rerankers run different
graphs of one checkpoint and must differ in nothing else: the same tokenizer call on
the pair (query first, truncation strategy, ``max_length``, padding to the batch's
longest, token type ids), so "ONNX fp32 equals in-process fp32" is a statement about the
graph alone. Its calibration samples, for static int8 of a reranker, are pairs made of
corpus documents: every query of a pipeline is judged, so none of them may be used.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evalq.engines.reranker import RerankSettings

# A calibration pair's query: the first words of a drawn corpus document, about a
# search query's length.
QUERY_WORDS = 12


class PairFront:
    """The model folder's tokenizer, called on pairs exactly as the cross-encoders need."""

    calibration_source = (
        f"(query, document) pairs of corpus documents: the first {QUERY_WORDS} words of a "
        "drawn document as the query, with that document or the next drawn one (never the "
        "judged queries)")

    def __init__(self, model_path: str | Path, settings: RerankSettings) -> None:
        from transformers import AutoTokenizer

        self.settings = settings
        self.tokenizer: Any = AutoTokenizer.from_pretrained(str(model_path),
                                                            local_files_only=True)

    def encode(self, queries: Sequence[str], documents: Sequence[str], **kwargs: Any) -> Any:
        """The tokenizer on ``(queries[i], documents[i])`` with the settings' truncation."""
        return self.tokenizer(list(queries), list(documents),
                              truncation=self.settings.truncation,
                              max_length=self.settings.max_length, **kwargs)

    def pair_lengths(self, queries: Sequence[str], documents: Sequence[str]) -> list[int]:
        """Tokens of each pair after truncation (for packing batches by token budget)."""
        if not queries:
            return []
        encoded = self.encode(queries, documents, padding=False, return_attention_mask=False,
                              return_token_type_ids=False)
        return [len(ids) for ids in encoded["input_ids"]]

    def batch(self, pairs: Sequence[tuple[str, str]], tensors: str = "pt") -> Any:
        """``(query, document)`` pairs padded to the longest (``tensors``: "pt" or "np")."""
        return self.encode([q for q, _ in pairs], [d for _, d in pairs], padding=True,
                           return_tensors=tensors)

    def calibration_samples(self, drawn: list[tuple[str, str]]
                            ) -> tuple[list[str], list[tuple[str, str]]]:
        """Drawn corpus documents as calibration pairs: document k's first words as the
        query, against document k itself (even k) or the next drawn one (odd k), so the
        samples span related and unrelated pairs. Ids: ``"<query doc>|<document>"``."""
        ids: list[str] = []
        pairs: list[tuple[str, str]] = []
        for k, (doc_id, text) in enumerate(drawn):
            other_id, other = drawn[k if k % 2 == 0 else (k + 1) % len(drawn)]
            ids.append(f"{doc_id}|{other_id}")
            pairs.append((" ".join(text.split()[:QUERY_WORDS]), other))
        return ids, pairs


__all__ = ["QUERY_WORDS", "PairFront"]
