"""What a server *is*, for the embedding cache: URL and model name are not enough.

A model redeployed under the same name and URL (a new quantization, a new revision)
would otherwise reuse the old deployment's cached vectors. :func:`server_identity` folds
into the cache key what the server reports about itself (``/v1/models`` or ``/info``,
without volatile fields such as ``created``) and *which* embedding it gives a fixed probe
text.

The probe vector is matched, not hashed: a GPU server's vectors wobble in the last bits
between runs, so hashing rounded values would miss the cache at random. Probe vectors
seen for a base key are kept under the cache folder (``servers/<key>.npy``); a new probe
within cosine ``1 - 1e-5`` of a stored one reuses that one's identity, anything else
becomes a new identity (and so new cache keys).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core import atomicio
from evalq.core.errors import BackendUnavailableError, InputError

PROBE_TEXT = ("evalq cache probe: the quick brown fox jumps over the lazy dog, "
              "then reads the manual twice.")
SAME_PROBE_COSINE = 1 - 1e-5
_VOLATILE = frozenset({"created", "created_at", "timestamp", "uptime"})
# The fields an HTTP client's errors name when no server answered at all (retries spent).
_UNREACHED = frozenset({"url", "http.url"})


def stable_report(value: Any) -> Any:
    """A server's self-report without fields that change on every request."""
    if isinstance(value, dict):
        return {k: stable_report(v) for k, v in sorted(value.items()) if k not in _VOLATILE}
    if isinstance(value, list):
        return [stable_report(v) for v in value]
    return value


def probe_generation(store: Path, base_key: str, vector: np.ndarray) -> str:
    """Short id of the stored probe this vector matches (a new one is stored if none)."""
    vector = np.asarray(vector, dtype=np.float32).ravel()
    norm = float(np.linalg.norm(vector)) or 1.0
    unit = vector / norm
    path = store / f"{hashlib.sha256(base_key.encode()).hexdigest()[:32]}.npy"
    known = np.zeros((0, len(unit)), dtype=np.float32)
    if path.is_file():
        try:
            loaded = np.load(path, allow_pickle=False)
            if loaded.ndim == 2 and loaded.shape[1] == len(unit):
                known = loaded.astype(np.float32)
        except (OSError, ValueError, EOFError):
            pass  # an unreadable store only costs cache hits
    for row in known:
        if float(row @ unit) >= SAME_PROBE_COSINE:
            return hashlib.sha256(row.tobytes()).hexdigest()[:16]
    known = np.vstack([known, unit[None, :]])
    import io

    buffer = io.BytesIO()
    np.save(buffer, known, allow_pickle=False)
    atomicio.write_bytes(path, buffer.getvalue())
    return hashlib.sha256(unit.astype(np.float32).tobytes()).hexdigest()[:16]


def server_identity(base_key: str, report: Callable[[], Any],
                    embed_probe: Callable[[], np.ndarray], store: Path) -> dict[str, Any]:
    """``{"report": ..., "probe": id}``: what goes into the encoder's fingerprint.

    A report that could not be read because the server did not answer (retries spent,
    connection lost) raises: it used to become ``{"unavailable": "<ExceptionName>"}``,
    so a transient error gave a new key and two failing servers shared one."""
    try:
        reported = stable_report(report())
    except BackendUnavailableError:
        raise  # transient: a failure that may not recur must not become part of a key
    except InputError as exc:
        if exc.field in _UNREACHED:
            raise  # nothing answered: no identity is made of that either
        # The server answered, deterministically, without a report (an older server
        # without the route, a 4xx): that answer is its report, and its probe vector
        # tells two such servers apart.
        reported = {"no_report": exc.field}
    probe = probe_generation(store, base_key + json.dumps(reported, sort_keys=True),
                             embed_probe())
    return {"report": reported, "probe": probe}
