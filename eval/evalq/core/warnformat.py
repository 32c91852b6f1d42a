"""How evalq's warnings read on the command line: one clean line, never evalq's source.

Python prints a warning as ``<file>:<line>: <Category>: <message>`` followed by the
source line, so a cache chunk that failed its checksum read as
``…/evalq/encode/cache.py:141: RuntimeWarning: …`` — a line of evalq that tells the user
nothing and looks like a crash. The CLI installs :func:`install` once: a warning raised
from evalq's own code (or placed past the top of the stack, ``sys:1``, as the score cache
does) is printed as ``evalq: warning: <message>`` (the message names the file concerned);
warnings from other libraries keep Python's format. The Python API leaves the caller's
warning settings alone.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

_PACKAGE = Path(__file__).resolve().parents[1]
_python_format = warnings.formatwarning


def is_evalqs(filename: str) -> bool:
    if filename == "sys":
        return True
    try:
        return Path(filename).resolve().is_relative_to(_PACKAGE)
    except (OSError, ValueError):
        return False


def format_warning(message: Warning | str, category: type[Warning], filename: str,
                   lineno: int, line: str | None = None) -> str:
    if is_evalqs(filename):
        text = " ".join(str(message).split())  # one line
        return f"evalq: warning: {text}\n"
    return _python_format(message, category, filename, lineno, line)


def install() -> Any:
    """Use :func:`format_warning` from now on; returns what it replaced."""
    previous = warnings.formatwarning
    warnings.formatwarning = format_warning
    return previous
