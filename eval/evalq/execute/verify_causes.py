"""Why a deployment's vectors differ from a certificate's: each cause by its own check.

Pure functions of the probe set's vectors (as the deployment returned them, before any
client-side normalization), the certified vectors, each text's role and token count, and
the certified settings. The checks read the pattern of the differences:

- norms away from 1 where the certificate normalized: normalization is missing;
- fewer dimensions: Matryoshka dimensions cut (and whether they were renormalized);
- only queries differ: the query instruction or prompt is missing or different;
- only texts longer than every matching text differ: another truncation length;
- every text differs: another pooling, dtype, numerics class or model (the caller adds
  what the certificate's identity tells apart: weights, class, engine versions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

NORM_SLACK = 1e-3  # |norm - 1| a normalized float32 vector stays within


@dataclass(frozen=True)
class Comparison:
    matched: bool
    min_cosine: float
    causes: tuple[str, ...]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    out: np.ndarray = np.sum(a * b, axis=1) / np.where(norms == 0, 1.0, norms)
    return out


def _dimensions(served: np.ndarray, certified: np.ndarray, tolerance: float) -> str:
    d, full = served.shape[1], certified.shape[1]
    if d < full and np.all(1.0 - cosines(served, certified[:, :d]) <= tolerance):
        norms = np.linalg.norm(served, axis=1)
        renormalized = bool(np.all(np.abs(norms - 1.0) <= NORM_SLACK))
        return (f"Matryoshka dimensions cut to {d} of {full}"
                + ("" if renormalized else " without renormalizing"))
    return f"{d} dimensions where the certificate has {full} (another model or head)"


def _pattern(bad: np.ndarray, roles: Sequence[str], tokens: Sequence[int],
             settings: dict[str, Any]) -> str:
    queries = np.array([r == "query" for r in roles])
    lengths = np.asarray(tokens)
    if bad.all():
        return ("every probe text differs: another pooling (mean / CLS / last-token), "
                "dtype, numerics class or model")
    if bad[queries].all() and not bad[~queries].any():
        prefix = settings.get("query_prefix") or ""
        return ("a missing or different query instruction or prompt: queries differ, "
                "documents match" + (f" (certified query prefix {prefix!r})" if prefix
                                     else ""))
    if lengths[bad].min() > lengths[~bad].max():
        return (f"another truncation length: texts of more than {int(lengths[~bad].max())} "
                f"tokens differ, every shorter one matches (certified max_length "
                f"{settings.get('max_length')})")
    return f"{int(bad.sum())} of {len(bad)} probe texts differ, with no pattern evalq knows"


def compare(served: np.ndarray, certified: np.ndarray, roles: Sequence[str],
            tokens: Sequence[int], settings: dict[str, Any], tolerance: float) -> Comparison:
    """``served`` against ``certified`` within ``tolerance`` (1 − cosine), with causes.
    In float64: a server's float32 vectors of finite values near 1e20 and up overflow a
    float32 norm, which printed 'vector norms inf to inf' (and numpy's overflow warnings,
    with its source paths) for norms a float64 holds."""
    served = np.asarray(served, dtype=np.float64)
    certified = np.asarray(certified, dtype=np.float64)
    if served.shape != certified.shape:
        return Comparison(False, float("nan"), (_dimensions(served, certified, tolerance),))
    cos = cosines(served, certified)
    causes = []
    norms = np.linalg.norm(served, axis=1)
    if settings.get("normalize", True) and np.any(np.abs(norms - 1.0) > NORM_SLACK):
        causes.append(f"missing normalization: vector norms {norms.min():.3g} to "
                      f"{norms.max():.3g}, the certificate's are 1")
    if not np.isfinite(served).all():
        causes.append(f"{int((~np.isfinite(served).all(axis=1)).sum())} of {len(served)} "
                      "probe vectors hold NaN or infinite values (a broken deployment)")
    # NaN is no match: `1 - nan > tolerance` is false, so NaN vectors used to verify
    bad = ~(1.0 - cos <= tolerance)
    if bad.any():
        causes.append(_pattern(bad, roles, tokens, settings))
    return Comparison(not causes, float(cos.min()) if len(cos) else 1.0, tuple(causes))


__all__ = ["Comparison", "compare", "cosines"]
