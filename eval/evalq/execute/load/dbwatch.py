"""One step's watch of the database server in ``evalq load``'s database stage: what
:mod:`evalq.retrieve.serverwatch` found can be watched, sampled while the step runs.

- a process tree on this host: :class:`evalq.execute.load.serverstats.ProcessSampler`,
  the sampler of the served models' servers (CPU seconds and cores from ``cpu_times``,
  peak RSS every 0.2 s), so the two kinds of step read alike;
- the memory the server reports itself (Qdrant's ``/metrics``): read at the start, every
  ``metrics_interval_s`` and at the end of the step, its peak kept;
- neither: ``sampled: false`` and the reason, never zeros.

The step's ``server`` part is :class:`evalq.results.dbpart.StepServer`, validated here
as it is made.
"""

from __future__ import annotations

from typing import Any

from evalq.execute.load.serverstats import ProcessSampler
from evalq.execute.periodic import Periodic
from evalq.results.dbpart import StepServer
from evalq.retrieve.serverwatch import ServerWatch

_MIB = 2**20


class DatabaseSampler:
    """A context manager around one step; ``result`` is the step's ``server`` part."""

    def __init__(self, watch: ServerWatch, metrics_interval_s: float = 0.5) -> None:
        self.watch = watch
        self.metrics_interval_s = metrics_interval_s
        self.process = ProcessSampler(watch.pid) if watch.pid is not None else None
        self._ticks = Periodic(self._read, metrics_interval_s, "evalq-db-metrics")
        self._peak: dict[str, float] = {}
        self._reports = 0
        self.result: dict[str, Any] = {}

    def _read(self) -> None:
        assert self.watch.memory is not None
        figures = self.watch.memory()
        if not figures:
            return
        self._reports += 1
        for name, value in figures.items():
            self._peak[name] = max(self._peak.get(name, 0.0), value)

    def __enter__(self) -> DatabaseSampler:
        if self.process is not None:
            self.process.__enter__()
        if self.watch.memory is not None:
            self._read()
            self._ticks.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._ticks.stop(join_s=10):
            self._read()
        figures: dict[str, Any] = {}
        if self.process is not None:
            self.process.__exit__(*exc)
            figures = {k: self.process.result.get(k)
                       for k in ("cpu_s", "cpu_cores", "peak_rss_mb", "processes")}
        if self.watch.memory is not None:
            figures.update(reported_resident_mb=self._mib("memory_resident_bytes"),
                           reported_allocated_mb=self._mib("memory_allocated_bytes"),
                           reports=self._reports)
        self.result = StepServer(sampled=self.watch.sampled, reason=self.watch.reason,
                                 **figures).model_dump(mode="json")

    def _mib(self, name: str) -> float | None:
        value = self._peak.get(name)
        return None if value is None else round(value / _MIB, 1)


# -- how the console says it ---------------------------------------------------------------

def short_reason(reason: str | None) -> str:
    """Why a server was not sampled, in a word: ``remote``, ``in-proc`` (evalq's own
    process) or ``not found`` (on this host, but no process of its could be read)."""
    why = reason or ""
    return ("remote" if why.startswith("remote server") else
            "in-proc" if why.startswith("in-process") else "not found")


def not_sampled(reason: str | None) -> str:
    """``not sampled (remote)``, for a step's line and the stage's."""
    return f"not sampled ({short_reason(reason)})"


def step_text(server: dict[str, Any]) -> str:
    """A step's server figures for its console line."""
    if not server.get("sampled"):
        return f"server {not_sampled(server.get('reason'))}"
    parts = []
    if server.get("cpu_cores") is not None:
        parts.append(f"{server['cpu_cores']:.2f} cores")
    if server.get("peak_rss_mb") is not None:
        parts.append(f"{server['peak_rss_mb']:.0f} MiB RSS")
    if server.get("reported_resident_mb") is not None:
        parts.append(f"{server['reported_resident_mb']:.0f} MiB resident (its /metrics)")
    return "server " + (", ".join(parts) or "sampled, no figure came back")


def sampling_text(sampling: dict[str, Any] | None) -> str:
    """The stage's sampling for its summary line under the table."""
    if not sampling:
        return "server not sampled"
    if not sampling.get("sampled"):
        return f"server {not_sampled(sampling.get('reason'))}: {sampling.get('reason')}"
    said = []
    if sampling.get("pid") is not None:
        said.append(f"sampled {sampling.get('scope')}")
    if sampling.get("metrics"):
        said.append(f"memory from {sampling['metrics']} (its allocator's, no CPU)")
    if sampling.get("reason"):
        said.append(f"no process: {sampling['reason'].split(';')[0]}")
    return "server " + "; ".join(said)


def table_cells(steps: list[dict[str, Any]]) -> tuple[str, str]:
    """The table's ``srv cores`` and ``srv MiB`` of a database stage: the peaks over its
    steps (RSS, else the memory the server reports), or why there is none."""
    servers = [s.get("server") or {} for s in steps]
    if servers and not any(s.get("sampled") for s in servers):
        short = short_reason(servers[0].get("reason"))
        return short, short
    cores = [float(s["cpu_cores"]) for s in servers if s.get("cpu_cores") is not None]
    mem = [float(m) for m in (s.get("peak_rss_mb") if s.get("peak_rss_mb") is not None
                              else s.get("reported_resident_mb") for s in servers)
           if m is not None]
    return (f"{max(cores):.2f}" if cores else "-", f"{max(mem):.0f}" if mem else "-")
