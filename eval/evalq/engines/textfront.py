"""The text side every local embedding backend shares: tokenizer, pooling, normalization.

The in-process, ONNX Runtime and OpenVINO backends run different graphs for the same
transformer, and must differ in nothing else: the same tokenizer call (truncation side,
``max_length``, padding to the batch's longest), the same pooling arithmetic and the same
normalization. Keeping these in one place is what makes "ONNX fp32 equals in-process
fp32" a statement about the graph alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.values import EncodingSettings
from evalq.engines.lasttoken import eos_to_append, ids_with_eos
from evalq.engines.tokenizer_identity import TokenizerIdentity, load_tokenizer


class TokenizerFront:
    """The model folder's tokenizer, called exactly as the encoders need it."""

    # What static quantization calibrates on through this front (``quantize.derive``).
    calibration_source = "corpus documents (never the judged queries)"

    def __init__(self, model_path: str | Path, settings: EncodingSettings,
                 known: TokenizerIdentity | None = None) -> None:
        """``known``: what a certificate says AutoTokenizer resolved for this folder
        (``tokenizer_identity``); it is loaded directly where that still holds."""
        self.settings = settings
        self.tokenizer: Any = load_tokenizer(model_path, known)
        self.tokenizer.truncation_side = settings.truncation_side
        self.tokenizer.padding_side = settings.padding_side
        # The EOS id evalq appends itself (``append_eos``, decoder embedders whose
        # tokenizer does not), or None: then the tokenizer's own output is used as is.
        self.eos_id = eos_to_append(self.tokenizer, settings)

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        """Token counts with special tokens, after truncation to ``settings.max_length``."""
        if not texts:
            return []
        if self.eos_id is not None:
            return [len(ids) for ids in ids_with_eos(self.tokenizer, texts,
                                                     self.settings.max_length, self.eos_id)]
        encoded = self.tokenizer(
            list(texts), truncation=True, max_length=self.settings.max_length,
            padding=False, return_attention_mask=False, return_token_type_ids=False,
        )
        return [len(ids) for ids in encoded["input_ids"]]

    def calibration_samples(self, drawn: list[tuple[str, str]]
                            ) -> tuple[list[str], list[str]]:
        """Drawn corpus documents as the encoder reads them: their ids, and their texts
        with the document prefix."""
        prefix = self.settings.document_prefix
        return [i for i, _ in drawn], [prefix + t for _, t in drawn]

    def batch(self, texts: Sequence[str], tensors: str = "pt") -> Any:
        """The batch padded to its longest member (``tensors``: "pt" or "np"): the
        tokenizer's own call (as sentence-transformers makes it), or ids with the EOS
        appended when ``append_eos`` asks."""
        if self.eos_id is None:
            return self.tokenizer(list(texts), truncation=True,
                                  max_length=self.settings.max_length, padding=True,
                                  return_tensors=tensors)
        ids = ids_with_eos(self.tokenizer, texts, self.settings.max_length, self.eos_id)
        return self.tokenizer.pad({"input_ids": ids}, padding=True, return_tensors=tensors)


def pool(hidden: Any, mask: Any, pooling: str) -> Any:
    """Pool token states ``(B, T, H)`` under ``mask`` ``(B, T)`` into ``(B, H)``.

    Arithmetic mirrors sentence-transformers (sum in float32 for half dtypes, divide by
    the clamped token count) so float32 output is bit-for-bit comparable. ``cls`` takes
    the first unmasked token and ``last`` the last unmasked one, which is right for both
    left and right padding.
    """
    import torch

    if pooling == "mean":
        acc = torch.float32 if hidden.dtype in (torch.float16, torch.bfloat16) else hidden.dtype
        weights = mask.unsqueeze(-1).to(hidden.dtype)
        summed = (hidden * weights).sum(dim=1, dtype=acc)
        counts = torch.clamp(mask.sum(dim=1, dtype=acc).unsqueeze(-1), min=1e-9)
        return summed / counts
    rows = torch.arange(hidden.shape[0], device=hidden.device)
    if pooling == "cls":
        index = mask.to(torch.int32).argmax(dim=1)
    elif pooling == "last":
        length = mask.shape[1]
        index = length - 1 - mask.flip(1).to(torch.int32).argmax(dim=1)
    else:
        raise ValueError(f"unknown pooling {pooling!r}")
    return hidden[rows, index].to(torch.float32)


def pooled_vectors(hidden: Any, mask: Any, settings: EncodingSettings) -> np.ndarray:
    """float32 ``(B, H)`` on the CPU: ``settings``' pooling, then L2 normalization if
    asked. ``hidden`` and ``mask`` are torch tensors or numpy arrays (an ONNX Runtime or
    OpenVINO output goes through the same torch arithmetic as the in-process model's)."""
    import torch

    hidden = torch.from_numpy(np.ascontiguousarray(hidden)) if isinstance(hidden, np.ndarray) \
        else hidden
    mask = torch.from_numpy(np.asarray(mask)) if isinstance(mask, np.ndarray) else mask
    with torch.inference_mode():
        out = pool(hidden, mask, settings.pooling)
        if settings.normalize:
            out = torch.nn.functional.normalize(out, p=2, dim=1)
        return out.to(device="cpu", dtype=torch.float32).numpy()


__all__ = ["TokenizerFront", "pool", "pooled_vectors"]
