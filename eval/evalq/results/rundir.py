"""Owning a results folder for the length of a run.

* One run at a time: :class:`RunLock` holds an exclusive ``flock`` on ``.evalq.lock`` in the
  folder (released by the kernel if the process dies, so a crash never leaves a stale
  lock); a second run into the same folder stops with exit 2 naming the first's PID.
* No stale files: a rerun into an old folder removes the per-variant files of variants the
  recipe no longer has (:func:`remove_stale_variants`), so nothing sits beside a summary
  that does not list it.
* Why it stopped: :func:`record_stop` writes ``status`` (``interrupted`` or ``failed``),
  the redacted error and, for an evalq bug, the crash log's path into the manifest.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import socket
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from evalq.core import failure
from evalq.core.errors import BackendUnavailableError, InputError
from evalq.core.redact import redact
from evalq.results.folder import now_iso

log = logging.getLogger(__name__)

LOCK_NAME = ".evalq.lock"
_PER_VARIANT = (("per_query", ".jsonl"), ("per_text", ".json"), ("runs", ".trec"))


class RunLock:
    """Exclusive lock on a results folder; ``acquire`` raises InputError if held."""

    def __init__(self, folder: Path) -> None:
        self.path = Path(folder) / LOCK_NAME
        self._handle: Any = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+", encoding="utf-8")  # noqa: SIM115  (held open)
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise InputError(
                message=f"another evalq run is writing this results folder (PID {holder})",
                file=self.path.parent,
                fix="wait for it to finish, stop it, or give this run another --output",
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()} on {socket.gethostname()}\n")
        handle.flush()
        self._handle = handle

    def release(self) -> None:
        if self._handle is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)
        fcntl.flock(self._handle.fileno(), fcntl.LOCK_UN)
        self._handle.close()
        self._handle = None


# What an indexed variant writes beside its own files: its exact search (the loss split),
# its index's values, and each swept point (`<variant>.sweep0`, `<variant>.sweep0.index`).
_COMPANION = re.compile(r"\.(exact|index|sweep\d+(\.index)?)$")


def remove_stale_variants(folder: Path, variants: Iterable[str]) -> list[Path]:
    """Delete per-variant files of variants not in ``variants``; the paths removed. A kept
    variant's companions are kept too (every rerun of an indexed variant used to sweep its
    `.exact` / `.index` / `.sweepN` files as "no longer in the recipe")."""
    keep = set(variants)
    removed = []
    for sub, suffix in _PER_VARIANT:
        for path in sorted((Path(folder) / sub).glob(f"*/*{suffix}")):
            stem = path.name[: -len(suffix)]
            if path.is_file() and stem not in keep and _COMPANION.sub("", stem) not in keep:
                path.unlink()
                removed.append(path)
    if removed:
        log.info(f"[evalq] removed {len(removed)} file(s) of variants no longer in the "
                 f"recipe from {folder} (e.g. {removed[0].name})")
    return removed


def record_stop(folder: Any, manifest: dict[str, Any], exc: BaseException) -> None:
    """Write why the run stopped into the manifest; never raises (the cause matters more)."""

    if isinstance(exc, KeyboardInterrupt):
        manifest["status"] = "interrupted"
        manifest["signal"] = "SIGTERM" if isinstance(exc, failure.Terminated) else "SIGINT"
    else:
        manifest["status"] = "failed"
    manifest["error"] = redact(str(exc) or type(exc).__name__)
    user = isinstance(exc, InputError | BackendUnavailableError | KeyboardInterrupt
                      | MemoryError) or (
        isinstance(exc, OSError) and failure.user_os_error(exc) is not None)
    if not user and isinstance(exc, Exception):
        log = failure.write_crash_log(exc)
        exc.evalq_crash_log = log  # type: ignore[attr-defined]
        manifest["error_kind"] = "evalq bug"
        manifest["crash_log"] = str(log) if log else None
    manifest["stopped"] = now_iso()
    # A full disk cannot take the manifest either; the message still reaches stderr.
    with contextlib.suppress(OSError, ValueError, TypeError):
        folder.write_manifest(manifest)
