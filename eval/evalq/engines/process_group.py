"""A server process evalq starts and must never leave behind (vLLM, a recipe's launch
command): its own process group, the parent-death signal, a health wait that notices an
early exit, and a stop that takes the whole group down.

One module for every server evalq manages, so a fix to how servers start or stop reaches
all of them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

_PR_SET_PDEATHSIG = 1


def _child_setup_with_death_signal() -> None:  # runs in the child between fork and exec
    os.setsid()
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _child_setup() -> None:
    os.setsid()


def pick_child_setup() -> Any:
    """``preexec_fn`` for a server: its own process group, plus the parent-death signal.

    Linux sends the parent-death signal when the *thread* that forked exits, so it is
    only safe when the main thread starts the server (the usual case)."""
    main = threading.current_thread() is threading.main_thread()
    if main and sys.platform.startswith("linux"):
        return _child_setup_with_death_signal
    return _child_setup


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def wait_healthy(process: subprocess.Popen[Any], url: str, health: str, timeout_s: float, *,
                 exited: Callable[[int], Exception], timed_out: Callable[[], Exception]) -> None:
    """Poll ``url + health`` until it answers 200; raise ``exited(code)`` if the process
    ends first, ``timed_out()`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    with httpx.Client(base_url=url, timeout=2.0) as client:
        while time.monotonic() < deadline:
            code = process.poll()
            if code is not None:
                raise exited(code)
            with contextlib.suppress(httpx.TransportError):
                if client.get(health).status_code == 200:
                    return
            time.sleep(0.5)
    raise timed_out()


def log_tail(path: Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a server log on one line ('' when unreadable)."""
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(t.strip() for t in text[-lines:])


def stop_group(process: subprocess.Popen[Any], timeout_s: float, linger_s: float) -> None:
    """SIGTERM the process group, wait ``timeout_s``, give stragglers (engine workers
    share the group) ``linger_s``, then SIGKILL what is left."""
    pgid = process.pid  # setsid made the child its group leader
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=timeout_s)
    deadline = time.monotonic() + linger_s
    while group_alive(pgid) and time.monotonic() < deadline:
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=5.0)
