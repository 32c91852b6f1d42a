"""How a run ends when it does not end well: exit codes CI can trust.

Four outcomes, never confused:

* **0 / 1** — every gate passed / a gate failed (decided by the caller);
* **2** — the user's side: a bad recipe or dataset, a misbehaving server, and the
  operating system refusing what the user asked for (a full disk, a read-only or
  non-directory output path, permissions). :func:`user_os_error` turns those ``OSError``s
  into :class:`~evalq.core.errors.InputError` naming the file;
* **3** — evalq itself failed (a bug): :func:`write_crash_log` keeps the message and the
  full traceback in the results folder's ``logs/`` (or ``.evalq-cache/logs/`` before a
  results folder exists) so the report can be filed;
* **130 / 143** — interrupted by SIGINT / SIGTERM. :func:`terminate_as_interrupt` makes
  SIGTERM (what CI runners and ``timeout`` send) behave like Ctrl-C, so the manifest
  says ``interrupted`` and finished cache chunks are kept, in any phase of the run.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import sys
import traceback
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType
from typing import Any

from evalq.core.errors import InputError
from evalq.core.redact import redact

EXIT_BUG = 3
EXIT_SIGINT = 130
EXIT_SIGTERM = 143

# errno values that mean "the machine or the user's paths refused", never "evalq is wrong".
USER_ERRNOS = frozenset({
    errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR,
    errno.EISDIR, errno.EEXIST, errno.ENAMETOOLONG, errno.EFBIG, errno.EMFILE,
})

_FIXES = {
    errno.ENOSPC: "free disk space (or point cache_dir / --output at a larger disk), then "
                  "rerun: finished embedding chunks are kept",
    errno.EDQUOT: "free space within your quota, then rerun",
    errno.EACCES: "choose a path you may write (e.g. --output DIR), or fix its permissions",
    errno.EPERM: "choose a path you may write, or fix its permissions",
    errno.EROFS: "the file system is read-only: choose --output / cache_dir on a writable one",
    errno.ENOTDIR: "a file sits where a folder is needed: remove it or choose another path",
    errno.EISDIR: "a folder sits where a file is needed: choose another path",
    errno.EEXIST: "a file sits where a folder is needed: remove it or choose another path",
    errno.ENAMETOOLONG: "use a shorter path",
    errno.EFBIG: "the file is larger than this file system allows: choose another disk",
    errno.EMFILE: "raise the open-file limit (ulimit -n)",
}


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the process was, so it unwinds like Ctrl-C."""


def user_os_error(exc: OSError) -> InputError | None:
    """An :class:`InputError` for an OS refusal the user can fix, else ``None``."""
    if exc.errno not in USER_ERRNOS:
        return None
    name = exc.filename or exc.filename2
    reason = exc.strerror or os.strerror(exc.errno or 0)
    return InputError(message=f"cannot write or read here: {reason}",
                      file=str(name) if name is not None else None,
                      fix=_FIXES.get(exc.errno or 0))


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated()


def terminate_as_interrupt() -> Any:
    """Install a SIGTERM handler raising :class:`Terminated` (main thread only); returns
    the previous handler for :func:`restore_sigterm`."""
    previous = signal.getsignal(signal.SIGTERM)
    # Not the main thread (an embedding caller): leave signals alone.
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGTERM, _raise_terminated)
    return previous


def restore_sigterm(previous: Any) -> None:
    """Put back what :func:`terminate_as_interrupt` replaced (an embedding caller's own)."""
    if previous is None:
        return
    with contextlib.suppress(ValueError, TypeError):
        signal.signal(signal.SIGTERM, previous)


_logs_dir: Path | None = None


def set_logs_dir(path: Path | None) -> None:
    """Where a crash log goes for the run in progress (its results folder's ``logs/``)."""
    global _logs_dir
    _logs_dir = path


def write_crash_log(exc: BaseException, argv: list[str] | None = None) -> Path | None:
    """Write message + traceback to ``logs/evalq-crash-<time>.log``; the path, or None."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    text = (f"evalq crashed ({type(exc).__name__}: {exc})\n"
            f"argv: {argv if argv is not None else sys.argv}\n\n"
            + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)))

    text = redact(text)
    for folder in (_logs_dir, Path(".evalq-cache") / "logs"):
        if folder is None:
            continue
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"evalq-crash-{stamp}-{os.getpid()}.log"
            path.write_text(text, encoding="utf-8")
            return path
        except OSError:
            continue
    return None
