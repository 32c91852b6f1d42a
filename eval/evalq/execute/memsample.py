"""Each variant's own peak memory, measured while it runs.

``ru_maxrss`` is the process-lifetime maximum: after a variant that peaked at 1.3 GB,
every later variant would report 1.3 GB. :class:`PeakRss` instead samples the resident
set size of this process, and separately of its child processes (vLLM engines and
servers), every ``interval_s`` on a daemon thread for the length of a ``with`` block, and
reports the largest values seen. Short spikes between two samples can be missed; the
interval is recorded beside the figure.
"""

from __future__ import annotations

from typing import Any

import psutil

from evalq.execute.periodic import Periodic

METHOD = "psutil RSS sampled every {interval:g} s during the variant (own process; children summed)"


class PeakRss:
    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self.peak_bytes = 0
        self.children_peak_bytes = 0
        self._process = psutil.Process()
        self._ticks = Periodic(self._sample, interval_s, "evalq-peak-rss")

    def _sample(self) -> None:
        try:
            own = self._process.memory_info().rss
        except psutil.Error:
            return
        children = 0
        try:
            for child in self._process.children(recursive=True):
                try:
                    children += child.memory_info().rss
                except psutil.Error:
                    continue
        except psutil.Error:
            pass
        self.peak_bytes = max(self.peak_bytes, own)
        self.children_peak_bytes = max(self.children_peak_bytes, children)

    def __enter__(self) -> PeakRss:
        self._sample()
        self._ticks.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._ticks.stop(join_s=1)
        self._sample()

    def figures(self) -> dict[str, Any]:
        mib = 1 << 20
        return {"peak_rss_mb": self.peak_bytes / mib,
                "children_peak_rss_mb": self.children_peak_bytes / mib,
                "peak_rss_method": METHOD.format(interval=self.interval_s)}
