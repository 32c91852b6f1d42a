"""Parity preflight: do two backends embed the same texts the same way?

Before comparing a quantized candidate with its reference, evalq checks that the
*engines* agree at full precision — otherwise a retrieval drop blamed on quantization is
really an engine disagreement. The usual culprit (by far the most common report in vLLM's
and TEI's issue trackers) is a differing encoding setting: pooling, normalization,
maximum length, truncation side, or a prompt prefix. So the report carries each
backend's settings fingerprint, and a mismatch names the settings that differ; when the
settings agree and the vectors do not, it says the cause is in the weights or the engine.

Every backend receives exactly the same strings (no whitespace stripping or other
rewriting happens in evalq), so whitespace handling is the engine's own and shows up
here as a cosine gap rather than hiding.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from evalq.core.protocols import Encoder
from evalq.core.values import EncodingSettings
from evalq.data.streamed import sample_texts
from evalq.encode.matryoshka import common_dims

DEFAULT_MIN_COSINE = 0.9999


@dataclass(frozen=True)
class ParityResult:
    """One backend against the reference, on the same texts."""

    name: str
    mean_cosine: float | None
    min_cosine: float | None
    worst_text_index: int | None
    dim: int
    settings_fingerprint: str
    settings: dict[str, Any]
    differences: dict[str, tuple[Any, Any]]  # {setting: (this backend, reference)}
    passed: bool
    reason: str


@dataclass(frozen=True)
class ParityReport:
    reference: str
    n_texts: int
    min_cosine_required: float
    results: list[ParityResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failures(self) -> list[ParityResult]:
        return [r for r in self.results if not r.passed]

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ok"] = self.ok
        return data

    def summary_lines(self) -> list[str]:
        lines = [
            f"parity vs '{self.reference}' on {self.n_texts} texts "
            f"(min cosine required {self.min_cosine_required})"
        ]
        for r in self.results:
            status = "OK  " if r.passed else "FAIL"
            cos = "n/a"
            if r.mean_cosine is not None:
                cos = f"mean {r.mean_cosine:.6f} min {r.min_cosine:.6f}"
            lines.append(f"  {status} {r.name}: {cos} [{r.settings_fingerprint}] {r.reason}")
        return lines


def pick_parity_texts(texts: Sequence[str], n: int = 32) -> list[str]:
    """A deterministic few dozen texts: the longest half (truncation is where engines
    differ most) and an evenly spaced sample of the rest."""
    unique = sorted(set(texts), key=lambda t: (-len(t), t))
    if len(unique) <= n:
        return unique
    longest = unique[: n // 2]
    rest = unique[n // 2 :]
    step = len(rest) / (n - len(longest))
    return longest + [rest[int(i * step)] for i in range(n - len(longest))]


def _unit(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1.0, norms)


def parity_check(
    encoders: Mapping[str, Encoder],
    reference: str,
    texts: Sequence[str],
    *,
    min_cosine: float = DEFAULT_MIN_COSINE,
) -> ParityReport:
    """Embed ``texts`` with every encoder; cosine of each against ``encoders[reference]``.

    A backend passes when its *minimum* cosine reaches ``min_cosine`` (one badly truncated
    text is enough to matter). The reference itself is not listed in the results.
    """
    if reference not in encoders:
        raise KeyError(f"reference '{reference}' is not among the encoders {sorted(encoders)}")
    if not texts:
        raise ValueError("parity_check needs at least one text")
    ref = encoders[reference]
    ref_vectors = _unit(ref.embed(list(texts)))
    results = []
    for name, encoder in encoders.items():
        if name == reference:
            continue
        results.append(_compare(name, encoder, ref, ref_vectors, texts, min_cosine))
    return ParityReport(reference, len(texts), min_cosine, results)


def _compare(
    name: str,
    encoder: Encoder,
    ref: Encoder,
    ref_vectors: np.ndarray,
    texts: Sequence[str],
    min_cosine: float,
) -> ParityResult:
    return compare_vectors(name, encoder.settings, encoder.embed(list(texts)), ref.settings,
                           ref_vectors, min_cosine)


def compare_vectors(
    name: str,
    settings: EncodingSettings,
    vectors: np.ndarray,
    ref_settings: EncodingSettings,
    ref_vectors: np.ndarray,
    min_cosine: float = DEFAULT_MIN_COSINE,
) -> ParityResult:
    """Judge one backend's embeddings of the parity texts against the reference's.

    Separate from :func:`parity_check` so a run can embed variant by variant (one engine
    alive at a time, vectors from the embedding cache) and still judge them the same way.
    """
    diffs = settings.differences(ref_settings)
    if len(vectors) == len(ref_vectors) and np.ndim(vectors) == np.ndim(ref_vectors) == 2:
        # a Matryoshka variant (vectors.dims): judged at its width, see encode.matryoshka
        ref_vectors, vectors = common_dims(np.asarray(ref_vectors), np.asarray(vectors))
    vectors = _unit(vectors)
    ref_vectors = _unit(ref_vectors)
    common = {
        "name": name,
        "dim": int(vectors.shape[1]),
        "settings_fingerprint": settings.fingerprint(),
        "settings": settings.as_dict(),
        "differences": diffs,
    }
    if vectors.shape != ref_vectors.shape:
        return ParityResult(
            mean_cosine=None, min_cosine=None, worst_text_index=None, passed=False,
            reason=f"shape {vectors.shape} differs from the reference's {ref_vectors.shape}"
            + _diff_text(diffs),
            **common,
        )  # fmt: skip
    cosines = np.sum(vectors * ref_vectors, axis=1)
    worst = int(np.argmin(cosines))
    low = float(cosines[worst])
    passed = low >= min_cosine
    if passed:
        reason = "" if not diffs else "(agrees despite differing settings" + _diff_text(diffs) + ")"
    elif diffs:
        reason = "disagrees; settings that differ" + _diff_text(diffs)
    else:
        reason = (
            "disagrees with identical encoding settings: the cause is in the weights or the "
            f"engine (dtype, quantization, an engine default); worst text #{worst}"
        )
    return ParityResult(
        mean_cosine=float(np.mean(cosines)), min_cosine=low, worst_text_index=worst,
        passed=passed, reason=reason, **common,
    )  # fmt: skip


def _diff_text(diffs: Mapping[str, tuple[Any, Any]]) -> str:
    if not diffs:
        return ""
    parts = [f"{k}: {mine!r} vs reference {theirs!r}" for k, (mine, theirs) in diffs.items()]
    return ": " + "; ".join(parts)


def parity_sample(datasets: Sequence[Any], n: int) -> list[str]:
    """A few dozen texts from the first dataset: the longest (truncation is where engines
    differ most) and an even sample of the rest, queries and documents alike. Of a
    streamed corpus, its first block."""

    ds = datasets[0]
    return pick_parity_texts([*ds.queries.texts, *sample_texts(ds, " ")], n)


def exact_parity_required(variant: Any) -> bool:
    """Whether a variant must match the reference at parity: float32, unquantized, same
    weights. Others are reported only; their quantization is meant to move the cosine."""
    return (variant.dtype == "float32" and variant.quantization is None
            and variant.model is None and variant.vectors.quantize == "none")
