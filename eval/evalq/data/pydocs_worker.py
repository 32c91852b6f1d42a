"""Collect raw docstrings of the Python standard library and numpy (child-process side).

:mod:`evalq.data.pydocs` runs this file's *source* in a fresh interpreter
(``python -c``, from an empty working directory, ``PYTHONHASHSEED=0``), because importing
hundreds of modules is not something to do inside the caller's process: imports have side
effects (signal handlers, registered codecs, warnings), a hung import must be killable,
and the result must not depend on what the caller imported before. It therefore uses
only the standard library (plus numpy) and never imports evalq.

Output (stdout): one JSON document ``{"python": ..., "numpy": ..., "entries": [[id, kind,
name, signature, doc], ...]}``. Splitting docstrings into summary and body, filtering and
ordering happen in the parent, where they are unit-tested.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import json
import os
import pkgutil
import platform
import re
import signal
import sys
import warnings
from collections.abc import Mapping

# Imports with side effects (print, open windows or browsers, touch the terminal), test
# suites, data-only packages, and shims whose content depends on the environment
# (distutils is replaced by setuptools' copy when setuptools is installed).
SKIP_MODULES = frozenset(
    {
        "this", "antigravity", "idlelib", "tkinter", "turtle", "turtledemo", "test",
        "lib2to3", "ensurepip", "pydoc_data", "distutils", "readline", "rlcompleter",
        "encodings", "site", "sitecustomize", "usercustomize",
    }
)
SKIP_PARTS = frozenset({"test", "tests", "__main__", "idle_test"})
NUMPY_MODULES = (
    "numpy", "numpy.linalg", "numpy.fft", "numpy.random", "numpy.polynomial",
    "numpy.polynomial.polynomial", "numpy.polynomial.chebyshev", "numpy.polynomial.legendre",
    "numpy.polynomial.hermite", "numpy.polynomial.hermite_e", "numpy.polynomial.laguerre",
    "numpy.ma", "numpy.char", "numpy.strings", "numpy.rec", "numpy.emath", "numpy.lib",
    "numpy.lib.stride_tricks", "numpy.testing", "numpy.dtypes", "numpy.exceptions",
)
IMPORT_TIMEOUT_S = 30
MIN_DOC_CHARS = 200  # the parent keeps bodies >= 200 chars; shorter docs cannot qualify
ADDRESS = re.compile(r"\s+at 0x[0-9A-Fa-f]+")
SAFE_SCALARS = (int, float, complex, bool, str, bytes, type(None))
MAX_DEFAULT_CHARS = 80


class ImportTimeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise ImportTimeout


def _import(name: str):
    """Import a module or return None when it cannot be imported on this platform.

    A module that *hangs* is an error, not a skip: skipping depends on machine load,
    which would make the corpus differ from run to run.
    """
    signal.signal(signal.SIGALRM, _on_alarm)
    signal.alarm(IMPORT_TIMEOUT_S)
    try:
        return importlib.import_module(name)
    except ImportTimeout:
        raise SystemExit(f"pydocs: importing {name} took over {IMPORT_TIMEOUT_S}s") from None
    except (Exception, SystemExit):
        return None
    finally:
        signal.alarm(0)


def _is_private(name: str) -> bool:
    return any(part.startswith("_") for part in name.split("."))


def _skipped(name: str) -> bool:
    parts = name.split(".")
    return (
        parts[0] in SKIP_MODULES
        or parts[0].startswith("xx")
        or _is_private(name)
        or any(part in SKIP_PARTS for part in parts)
    )


def stdlib_modules() -> list[str]:
    """Public stdlib modules and their public submodules, sorted."""
    names: set[str] = set()
    pending = sorted(n for n in sys.stdlib_module_names if not _skipped(n))
    while pending:
        name = pending.pop()
        module = _import(name)
        if module is None:
            continue
        names.add(name)
        path = getattr(module, "__path__", None)
        if path:
            for info in sorted(pkgutil.iter_modules(path), key=lambda i: i.name):
                child = f"{name}.{info.name}"
                if not _skipped(child) and child not in names:
                    pending.append(child)
    return sorted(names)


class _Shown:
    """Stands in for a default value so a signature renders a fixed, safe text."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


_MACHINE_PATHS = tuple(
    p for p in {sys.executable, sys.prefix, sys.base_prefix, sys.exec_prefix, os.getcwd(),
                os.path.expanduser("~")} if p and p != os.sep
)


def _safe_repr(value) -> str | None:
    """A deterministic repr of a default value, or None when it has none.

    Reprs with memory addresses, environment contents (``os.environ``) or unordered sets
    would make the corpus differ between processes or leak the caller's environment.
    """
    if isinstance(value, (set, frozenset, Mapping)):
        return None
    if isinstance(value, (tuple, list)):
        if any(_safe_repr(v) is None for v in value):
            return None
    elif not (
        isinstance(value, SAFE_SCALARS)
        or inspect.isclass(value)
        or inspect.isroutine(value)
        or isinstance(value, enum.Enum)
    ) and type(value).__repr__ is object.__repr__:
        return None
    text = repr(value)
    if len(text) > MAX_DEFAULT_CHARS or "0x" in text:
        return None
    # Defaults such as platform.architecture(executable=sys.executable) spell out where this
    # interpreter lives: the corpus must not depend on the checkout's path or venv name.
    if isinstance(value, str) and any(
        place and place in value for place in _MACHINE_PATHS
    ):
        return f"<{type(value).__name__}>"
    return text


def signature_text(obj) -> str | None:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError, RuntimeError, AttributeError, NameError):
        return None
    params = []
    for param in sig.parameters.values():
        if param.default is not inspect.Parameter.empty:
            shown = _safe_repr(param.default)
            param = param.replace(
                default=_Shown(shown if shown is not None else f"<{type(param.default).__name__}>")
            )
        params.append(param)
    try:
        text = str(sig.replace(parameters=params))
    except (TypeError, ValueError):
        return None
    return ADDRESS.sub("", text)


def _wanted(obj) -> bool:
    return inspect.isclass(obj) or inspect.isroutine(obj) or type(obj).__name__ == "ufunc"


def _home_ok(obj, module_name: str) -> bool:
    """Take an object in the module that defines it, or in a public module re-exporting
    it from a private one (``io.StringIO`` lives in ``_io``)."""
    home = getattr(obj, "__module__", None)
    return home == module_name or not isinstance(home, str) or _is_private(home)


def collect(module_names: list[str]) -> list[list]:
    entries: list[list] = []
    # id() is only unique among live objects: bound methods are created afresh on each
    # attribute access and freed at once, so their ids get reused. Keep every seen object
    # alive (the dict values) and key methods by their underlying function.
    seen: dict[int, object] = {}

    def first_time(obj) -> bool:
        target = getattr(obj, "__func__", obj)
        if id(target) in seen:
            return False
        seen[id(target)] = target
        return True

    def add(qualname: str, kind: str, name: str, obj) -> None:
        doc = getattr(obj, "__doc__", None)
        if not isinstance(doc, str) or len(doc.strip()) < MIN_DOC_CHARS:
            return
        sig = None if kind == "module" else signature_text(obj)
        entries.append([qualname, kind, name, sig, ADDRESS.sub("", doc)])

    for module_name in module_names:
        module = sys.modules.get(module_name) or _import(module_name)
        if module is None:
            continue
        add(module_name, "module", module_name, module)
        for attr in sorted(vars(module)):
            if attr.startswith("_"):
                continue
            try:
                obj = getattr(module, attr)
            except Exception:
                continue
            if not _wanted(obj) or inspect.ismodule(obj) or not _home_ok(obj, module_name):
                continue
            if not first_time(obj):
                continue
            kind = "class" if inspect.isclass(obj) else "function"
            add(f"{module_name}.{attr}", kind, attr, obj)
            if not inspect.isclass(obj):
                continue
            for member in sorted(vars(obj)):
                if member.startswith("_"):
                    continue
                try:
                    value = getattr(obj, member)
                except Exception:
                    continue
                if not inspect.isroutine(value) or not first_time(value):
                    continue
                add(f"{module_name}.{attr}.{member}", "method", member, value)
    return entries


def main() -> None:
    # Silence anything an import prints, at the file-descriptor level, and keep the real
    # stdout for the JSON answer.
    out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    warnings.simplefilter("ignore")
    modules = stdlib_modules()
    numpy_version = None
    numpy = _import("numpy")
    if numpy is not None:
        numpy_version = numpy.__version__
        modules += [m for m in NUMPY_MODULES if _import(m) is not None]
    answer = {
        "python": platform.python_version(),
        "numpy": numpy_version,
        "entries": collect(modules),
    }
    out.write(json.dumps(answer, ensure_ascii=True).encode("ascii"))
    out.flush()


if __name__ == "__main__":
    main()
