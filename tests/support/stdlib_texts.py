"""Real English texts for tests: the standard library's own docstrings.

Real prose and code, offline, and stable for a given Python version; they need no dataset
module. The session fixtures in tests/conftest.py and the decoder tests read them from
here (a test module importing ``conftest`` gets whichever conftest pytest loaded first
when only some folders are collected).
"""

from __future__ import annotations

import importlib
import inspect

_DOC_MODULES = ("json", "pathlib", "collections", "functools", "itertools", "re", "textwrap",
                "argparse", "statistics", "heapq", "bisect", "shutil", "string", "difflib")


def stdlib_docstrings() -> list[str]:
    """Every distinct docstring of public callables in a few stdlib modules, in a fixed order."""
    seen: set[str] = set()
    texts: list[str] = []
    for name in _DOC_MODULES:
        module = importlib.import_module(name)
        candidates = [module] + [getattr(module, attr) for attr in sorted(dir(module))
                                 if not attr.startswith("_")]
        for obj in candidates:
            doc = inspect.getdoc(obj)
            if doc and doc not in seen and len(doc) > 20:
                seen.add(doc)
                texts.append(doc)
    return texts
