"""A reading taken every interval on a daemon thread, for the length of a step.

Three samplers read figures while something runs: a variant's peak RSS
(:mod:`evalq.execute.memsample`), a served model's process tree
(:mod:`evalq.execute.load.serverstats`) and a database's own memory report
(:mod:`evalq.execute.load.dbwatch`). Each reads once at the start and once at the end
itself, so a step shorter than one interval still has two readings; between them this
thread reads on every tick. One discipline for all three: a daemon thread (a read that
hangs never keeps evalq alive), stopped by an event (no sleep to wait out), and joined
for a bounded time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Periodic:
    """``read`` every ``interval_s`` between :meth:`start` and :meth:`stop`."""

    def __init__(self, read: Callable[[], None], interval_s: float, name: str) -> None:
        self.read, self.interval_s, self.name = read, interval_s, name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.read()

    def stop(self, join_s: float) -> bool:
        """Stop reading and wait up to ``join_s`` for a read in progress; whether the
        thread had been started (the caller's last reading depends on it)."""
        self._stop.set()
        if self._thread is None:
            return False
        self._thread.join(timeout=join_s)
        return True


__all__ = ["Periodic"]
