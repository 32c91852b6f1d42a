"""Atomic file writes: a killed process never leaves a half-written file behind.

Write to a temporary file in the same folder, flush and fsync, then ``os.replace``
(atomic on POSIX within one filesystem). Used by results and by the embedding cache;
:func:`built_folder`, the same for a whole folder (exported graphs, checkpoints,
fixture models); and :func:`check_output_location`, the one check of where a command's
output may go.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from evalq.core.errors import InputError

T = TypeVar("T")


def _read_umask() -> int:
    mask = os.umask(0)  # the only portable way to read it; done once, at import
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def named(exc: OSError, path: str | Path) -> OSError:
    """``exc`` with ``path`` as its file name when it has none. A full disk surfaces in
    ``write()`` / ``fsync()`` / a library's own writer, whose ``OSError`` names no file: the
    message then said only 'No space left on device', not which results or cache file."""
    if exc.filename is not None or exc.errno is None:
        return exc
    return type(exc)(exc.errno, exc.strerror or os.strerror(exc.errno), str(path))


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` atomically. Mode is 0666 minus the umask (0644 usually), like any
    ``open()`` would give: ``mkstemp``'s private 0600 would hide results and cache files
    from CI uploaders and dashboards running as another user."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise named(exc, path) from exc
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str | Path, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, allow_nan=False) + "\n")


# A build's private folder: ``.<target>.build-<host>-<pid>-<random>``, so a later build
# can tell a folder whose builder was killed (SIGKILL leaves it behind: tens of MB per
# graph) from one still being filled, on this host or another sharing the cache.
_BUILD_NAME = re.compile(r"\.build-(?P<host>[A-Za-z0-9_]+)-(?P<pid>\d+)-[A-Za-z0-9_]+$")


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", socket.gethostname())[:40] or "host"


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def sweep_stale_builds(folder: Path) -> list[Path]:
    """Remove the private build folders in ``folder`` whose builder, on this host, is no
    longer running (a killed build); returns what was removed. Another host's builds and
    live ones are left alone."""
    removed: list[Path] = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    host = _host()
    for entry in entries:
        match = _BUILD_NAME.search(entry.name)
        if (match and entry.name.startswith(".") and match["host"] == host
                and not _running(int(match["pid"])) and entry.is_dir()):
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


def built_folder(target: Path, build: Callable[[Path], T], *,
                 complete: Callable[[Path], bool]) -> T:
    """``build(work)`` fills a private folder beside ``target``, which is then renamed
    into place, so neither a reader nor an interrupted build ever sees half a folder.
    An incomplete folder already at ``target`` is replaced; one that another process
    completed first (``complete(target)``) is kept. Returns what ``build`` returned.
    Private folders that killed builds left beside it are removed first."""
    target.parent.mkdir(parents=True, exist_ok=True)
    sweep_stale_builds(target.parent)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.build-{_host()}-{os.getpid()}-",
                                 dir=target.parent))
    try:
        try:
            result = build(work)
        except OSError as exc:  # e.g. a graph export filling the disk: name the cache folder
            raise named(exc, target) from exc
        work.chmod(0o755)  # mkdtemp makes it private; the result is an ordinary folder
        if target.exists() and not complete(target):
            shutil.rmtree(target)
        try:
            os.replace(work, target)
        except OSError:  # another process finished first
            if not complete(target):
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return result


def check_output_location(path: str | Path, *, folder: bool, field: str | None = None,
                          what: str = "output") -> None:
    """Refuse, before any work, an output that cannot be created where it is asked for.

    The one check every command's output goes through (``evalq run -o``, ``cache_dir``,
    ``evalq init -o``, ``evalq calibrate --json``, ``evalq report -o``): a file where a
    folder is needed (``-o some.txt/out``), a folder where the file should go, a place this
    user may not write, a read-only or virtual file system (``/proc``). Without it these
    ended in exit 3 on the first temporary file. The test is real: a temporary file is
    created and removed in the nearest folder that exists (permission bits alone say
    nothing for root or on a read-only mount). Raises :class:`InputError` (exit 2).
    """
    path = Path(path)
    kind = "folder" if folder else "file"

    def refuse(message: str, fix: str) -> InputError:
        return InputError(message=f"{what} '{path}': {message}", field=field, fix=fix)

    if path.exists() or path.is_symlink():
        if folder and not path.is_dir():
            raise refuse("it is a file, not a folder", "remove that file or choose another path")
        if not folder and path.is_dir():
            raise refuse("it is a folder, not a file", "name a file inside it")
    probe = path if folder else path.parent
    while not probe.exists():
        if probe.is_symlink():
            raise refuse(f"'{probe}' is a link to nothing", "remove the link or choose "
                         "another path")
        if probe == probe.parent:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise refuse(f"'{probe}' is a file, so no {kind} can be created under it",
                     "remove that file or choose another path")
    try:
        fd, tmp = tempfile.mkstemp(prefix=".evalq-write-check.", dir=probe)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise refuse(f"nothing can be written in '{probe}' ({reason})",
                     f"choose a {kind} on a file system you may write, or fix the "
                     "permissions") from None
    os.close(fd)
    os.unlink(tmp)
