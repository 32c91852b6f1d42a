"""What the server did during a step (CPU, memory), and what it says about its batching.

:class:`ProcessSampler` watches the server's process *tree* (vLLM's API server hands
work to an engine-core child process, so the parent alone shows little): each process's
CPU seconds over the step, and the tree's peak resident memory, sampled every 0.2 s by a
thread. Only for servers evalq started; for a server at a URL the
figures are ``None`` with the reason, never made up.

:func:`read_server_settings` reads the batch settings a server reports — TEI's ``/info``
(``max_batch_tokens``, ``max_client_batch_size``, ``max_concurrent_requests``), the
OpenAI-style ``/v1/models`` (vLLM's ``max_model_len``, Infinity's ``stats.batch_size``)
and batch- or queue-related lines of a Prometheus ``/metrics`` page.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from typing import Any

import httpx

from evalq.execute.periodic import Periodic

_METRIC_LINE = re.compile(r"^(vllm:|tei_|infinity)?\S*(batch|num_seqs|max_model_len|"
                          r"queue|concurren)\S*\s", re.IGNORECASE)


class ProcessSampler:
    """CPU seconds and peak RSS of one process and its descendants over a step.

    CPU is counted per process, never as the difference of two tree totals: a database's
    backend (or a server's worker) that exits during the step takes its CPU seconds out
    of the tree's total, and the difference of totals went negative on a busy host. Each
    process's seconds are read when the step starts (zero for one born during it) and
    at every sample after; the step's CPU is the sum of each process's last reading less
    its first, so a process that exits keeps what it was last seen to have used.
    """

    def __init__(self, pid: int | None, interval_s: float = 0.2) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self._ticks = Periodic(self._sample, interval_s, "evalq-load-sampler")
        self._lock = threading.Lock()
        self._peak_rss = 0
        self._t0 = 0.0
        # keyed by (pid, start time), so a reused pid is another process
        self._cpu_first: dict[tuple[int, float], float] = {}
        self._cpu_last: dict[tuple[int, float], float] = {}

    def _tree(self) -> list[tuple[tuple[int, float], Any]]:
        import psutil

        try:
            root = psutil.Process(self.pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return []
        found = []
        for p in procs:
            with contextlib.suppress(psutil.Error):
                found.append(((p.pid, p.create_time()), p))
        return found

    def _sample(self, starting: bool = False) -> None:
        """Read each process's CPU seconds and the tree's resident memory once."""
        import psutil

        rss = 0
        with self._lock:
            for key, p in self._tree():
                with contextlib.suppress(psutil.Error):
                    t = p.cpu_times()
                    seconds = t.user + t.system
                    self._cpu_first.setdefault(key, seconds if starting else 0.0)
                    self._cpu_last[key] = seconds
                    rss += p.memory_info().rss
            self._peak_rss = max(self._peak_rss, rss)

    def _cpu_s(self) -> float:
        with self._lock:
            return sum(last - self._cpu_first[key] for key, last in self._cpu_last.items())

    def __enter__(self) -> ProcessSampler:
        if self.pid is None:
            return self
        self._sample(starting=True)
        self._t0 = time.perf_counter()
        self._ticks.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._ticks.stop(join_s=2)
        self.result = self._result()

    def _result(self) -> dict[str, Any]:
        if self.pid is None:
            return {"cpu_s": None, "cpu_cores": None, "peak_rss_mb": None,
                    "note": "server not started by evalq: no process to watch"}
        wall = time.perf_counter() - self._t0
        self._sample()
        cpu = self._cpu_s()
        return {"cpu_s": round(cpu, 3), "cpu_cores": round(cpu / wall, 3) if wall else None,
                "peak_rss_mb": round(self._peak_rss / 2**20, 1),
                "processes": len(self._cpu_last)}


def read_server_settings(base_url: str, timeout_s: float = 5.0) -> dict[str, Any]:
    """Whatever of ``/info``, ``/v1/models`` and ``/metrics`` the server answers."""
    out: dict[str, Any] = {}
    with httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout_s) as client:
        for path in ("/info", "/v1/models", "/models"):
            with contextlib.suppress(httpx.HTTPError, ValueError):
                r = client.get(path)
                if r.status_code == 200:
                    out[path] = _trim(r.json())
        with contextlib.suppress(httpx.HTTPError):
            r = client.get("/metrics")
            if r.status_code == 200:
                lines = [ln[:300] for ln in r.text.splitlines()
                         if not ln.startswith("#") and _METRIC_LINE.match(ln)
                         and "_bucket{" not in ln and "_created" not in ln]
                out["/metrics"] = lines[:40]
    out["batch"] = _batch_settings(out)
    return out


def _trim(value: Any, depth: int = 0) -> Any:
    """Keep a server's self-description small (some list every tokenizer option)."""
    if isinstance(value, dict):
        return {k: _trim(v, depth + 1) for k, v in list(value.items())[:40]}
    if isinstance(value, list):
        return [_trim(v, depth + 1) for v in value[:8]]
    if isinstance(value, str) and len(value) > 300:
        return value[:300] + "..."
    return value


def _batch_settings(found: dict[str, Any]) -> dict[str, Any]:
    """The few numbers that decide how a server batches, under one set of names."""
    batch: dict[str, Any] = {}
    info = found.get("/info")
    if isinstance(info, dict):
        for key in ("max_batch_tokens", "max_client_batch_size", "max_concurrent_requests",
                    "max_batch_requests", "max_input_length"):
            if key in info:
                batch[key] = info[key]
    for path in ("/v1/models", "/models"):
        models = found.get(path)
        data = models.get("data") if isinstance(models, dict) else None
        for m in data or []:
            if not isinstance(m, dict):
                continue
            if "max_model_len" in m:
                batch["max_model_len"] = m["max_model_len"]
            stats = m.get("stats")
            if isinstance(stats, dict) and "batch_size" in stats:
                batch["batch_size"] = stats["batch_size"]
    return batch
