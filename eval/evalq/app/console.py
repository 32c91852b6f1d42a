"""Where the library parts' console lines go: the app's console handler.

Only the app prints (``tests/project/test_architecture.py`` checks it). The other parts say what
they are doing through a logger of their own module, and a command's streamed result
text through ``evalq.core.messages.output`` (the two channels are described there).
:func:`install` (the CLI and ``evalq.run`` call it) writes each record's message as it
is, progress to stderr and results to stdout, where they were printed before they became
records. A program that uses the library without :func:`install` gets ordinary logging
records and routes them as it likes.
"""

from __future__ import annotations

import logging
import sys

from evalq.core import messages

PACKAGE_LOGGER = "evalq"  # every module logger of the package is below it


def is_output(name: str) -> bool:
    """Whether a record's logger is the result channel (stdout), not progress (stderr)."""
    return name == messages.OUTPUT_NAME or name.startswith(messages.OUTPUT_NAME + ".")


class ConsoleHandler(logging.Handler):
    """The message alone, to the ``sys.stdout`` / ``sys.stderr`` of the moment (a test's
    capture, a redirected stream), flushed: a progress line shows when it happens."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = sys.stdout if is_output(record.name) else sys.stderr
            stream.write(record.getMessage() + "\n")
            stream.flush()
        except Exception:  # logging's own contract: a failing handler reports, never raises
            self.handleError(record)


def install() -> logging.Logger:
    """Show evalq's progress and result lines on the console (a second call changes
    nothing)."""
    logger = logging.getLogger(PACKAGE_LOGGER)
    if not any(isinstance(h, ConsoleHandler) for h in logger.handlers):
        logger.addHandler(ConsoleHandler(logging.INFO))
    if logger.level == logging.NOTSET or logger.level > logging.INFO:
        logger.setLevel(logging.INFO)
    logger.propagate = False  # shown once, not again by a root handler
    return logger
