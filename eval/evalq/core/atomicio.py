"""Atomic file writes: a killed process never leaves a half-written file behind.

Write to a temporary file in the same folder, flush and fsync, then ``os.replace``
(atomic on POSIX within one filesystem). Used by results and by the embedding cache.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def _read_umask() -> int:
    mask = os.umask(0)  # the only portable way to read it; done once, at import
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` atomically. Mode is 0666 minus the umask (0644 usually), like any
    ``open()`` would give: ``mkstemp``'s private 0600 would hide results and cache files
    from CI uploaders and dashboards running as another user."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str | Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n")
