"""Corpus texts for static quantization to calibrate on, drawn from the run's datasets.

Static int8 (ONNX Runtime QDQ, OpenVINO NNCF) fits activation ranges to sample inputs.
They come from the corpora only: calibrating on the judged queries would fit the scales
to the very test that judges them. The draw is seeded and in corpus order, so the same
recipe calibrates on the same documents, and the quantization record lists their ids.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from evalq.data.streamed import sample_texts


def corpus_calibration(datasets: Sequence[Any], title_separator: str | None,
                       ) -> Callable[[int, int], list[tuple[str, str]]]:
    """``(n, seed) -> (doc id, text)`` pairs: n documents drawn without replacement from
    all datasets' corpora (the first block of a streamed one), read only when called."""
    def draw(count: int, seed: int) -> list[tuple[str, str]]:
        pairs: list[tuple[str, str]] = []
        for ds in datasets:
            texts = sample_texts(ds, title_separator)
            prefix = f"{ds.name}/" if len(datasets) > 1 else ""
            pairs.extend((prefix + str(i), t) for i, t in zip(ds.corpus.ids, texts,
                                                             strict=False))
        if len(pairs) <= count:
            return pairs
        picked = np.random.default_rng(seed).choice(len(pairs), size=count, replace=False)
        return [pairs[i] for i in sorted(picked.tolist())]
    return draw


__all__ = ["corpus_calibration"]
