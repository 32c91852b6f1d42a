"""One evalq at a time in a database kind's keyed folder (issue 30, "cached and
resumable").

A shard kept under the cache (:meth:`evalq.retrieve.kinds.KindOptions.with_home`) is
found again by the next run of the same recipe, and two runs may start at once. Qdrant's
in-process engine has no lock of its own: two processes writing one shard would corrupt
it. So the process that opens a key's folder holds an exclusive ``flock`` on its
``lock`` file while the shard is open; another evalq finds it held and stops with exit 2
(the lock goes with the process, so a killed run leaves none behind).
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from evalq.core.errors import InputError


def hold(folder: Path, what: str, field: str) -> IO[bytes]:
    """The open ``lock`` file of ``folder``, locked for this process; close it to let go.
    Held by another process: exit 2 naming ``what`` and ``field``."""
    folder.mkdir(parents=True, exist_ok=True)
    handle = open(folder / "lock", "a+b")  # noqa: SIM115 - held until close()
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise InputError(message=f"{what} is in use by another evalq (pid "
                                 f"{_holder(folder)})", field=field,
                         fix="wait for that run to finish and run again (it keeps the "
                             "shard for this one), or give this run its own path") from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()).encode())
    handle.flush()
    return handle


def _holder(folder: Path) -> str:
    try:
        return (folder / "lock").read_text().strip() or "unknown"
    except OSError:
        return "unknown"
