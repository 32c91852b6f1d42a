"""User-facing errors.

A user's mistake (a bad recipe, a malformed dataset, a wrong argument) is not our bug:
it becomes an :class:`InputError` that names the file, the line when known, the field
and the fix. The CLI prints it as one paragraph and exits 2; tracebacks are kept for
our own bugs.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evalq.core.redact import redact


@dataclass
class InputError(Exception):
    """Bad input: exit code 2 with a message naming where and how to fix it."""

    message: str
    file: str | Path | None = None
    line: int | None = None
    field: str | None = None
    fix: str | None = None

    def __str__(self) -> str:
        where = ""
        if self.file is not None:
            where = str(self.file)
            if self.line is not None:
                where += f":{self.line}"
        parts = [f"{where}: " if where else ""]
        if self.field:
            parts.append(f"field '{self.field}': ")
        parts.append(self.message.rstrip("."))
        text = "".join(parts) + "."
        if self.fix:
            text += f" Fix: {self.fix.rstrip('.')}."

        return redact(_single_stops(text))


def _single_stops(text: str) -> str:
    """No doubled punctuation where a message and its fix meet ("..", ".:", ". .")."""
    import re

    return re.sub(r"([.!?])(?:\s*\.)+(?=\s|$)", r"\1", text)


class MissingExtraError(InputError):
    """An optional dependency is not installed; the fix names the pip extra."""

    def __init__(self, module: str, extra: str, purpose: str) -> None:
        super().__init__(
            message=f"{purpose} needs the Python package '{module}', which is not installed",
            fix=f"pip install 'evalq[{extra}]'",
        )


class RecipeValueError(InputError, ValueError):
    """An :class:`InputError` raised inside a pydantic validator (pydantic turns only
    ``ValueError`` into a validation error); ``config`` keeps its message and fix and adds
    the recipe's file and line."""


class BackendUnavailableError(Exception):
    """A serving backend stopped answering mid-run (server died, connection lost).

    Not a user input error and not our bug: the run stops, keeps what it finished
    (embedding cache chunks) and reports the cause; a rerun resumes from the cache.
    """
