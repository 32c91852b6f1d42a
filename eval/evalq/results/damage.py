"""A results folder damaged in a way its typed models let through, read as bad input.

The typed models (:mod:`evalq.results.schema`) check the parts every reader needs; some
parts stay loose mappings (backend descriptions, encode statistics, the stored recipe),
and the report, ``evalq compare`` and ``evalq calibrate`` read fields inside them. A
hand-edited value of the wrong type there (``encode.documents: true``) used to surface
as ``AttributeError: 'bool' object has no attribute 'get'``, exit 3. Found by the
surface fuzzers (tests/faults/test_fuzz_surfaces.py). Around those readers, the errors a
wrong-typed or missing value raises become an :class:`InputError` naming the folder
(exit 2), the same rule ``evalq gate`` applies when it re-decides a folder.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from evalq.core.errors import InputError

DAMAGE = (AttributeError, TypeError, KeyError, IndexError, ValueError)


@contextlib.contextmanager
def damaged_folder_is_input(folders: Sequence[str | Path]) -> Iterator[None]:
    try:
        yield
    except InputError:
        raise
    except DAMAGE as exc:
        where = ", ".join(str(f) for f in folders)
        raise InputError(message=f"the results folder is damaged or was edited: a value in its "
                         f"summary.json or manifest.json has the wrong type or is missing "
                         f"({type(exc).__name__}: {exc})", file=where,
                         fix="rerun 'evalq run' to write a fresh folder") from None
