"""How ``evalq load`` may watch a database server while its database stage searches it
(issue 30): which process tree to sample for CPU and memory, what the server reports of
its own memory, or why nothing can be watched.

A latency figure without the server's load beside it cannot say whether the knee was the
database's CPU, its memory, or the network. evalq samples only what it can see honestly:

- **A process on this host.** The embedded PostgreSQL's postmaster (from its data
  folder). A ``dsn:`` server is on this host when the connection went through a unix
  socket or to a loopback (or this host's own) address: its backend's pid
  (``pg_backend_pid()``) must then be a PostgreSQL process here, and its parent, the
  postmaster, is sampled with its whole tree (every backend of the server, this run's
  and other clients' alike). A forwarded port or a container may answer on loopback from
  another pid namespace: a backend pid that is no PostgreSQL process here is refused,
  with the reason. A Qdrant server at a loopback ``url:`` is found by the port it
  listens on (``psutil.net_connections``); one listening inside evalq's own process (a
  test's stand-in) is not sampled as a server, since its CPU would be the load
  generator's too.
- **What the server reports.** Qdrant's ``GET /metrics`` gives its allocator's memory
  (``memory_resident_bytes``, ``memory_allocated_bytes``: jemalloc's figures, not the
  process's RSS, and no CPU); it is read whenever the server answers it, local or not.
- **Nothing.** A server elsewhere: ``sampled: false`` with ``reason: "remote server
  <host>"``, never a zero.

The locality decision (:func:`locality`) reads no network: it is the connection's own
host (or socket folder) and address against loopback and this host's interfaces.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
import psutil

from evalq.core.redact import without_password

# How long evalq waits for a database to take a new session or show its version page
# when asking whether it still serves (ConcurrentIndex.alive): longer is not serving.
ALIVE_TIMEOUT_S = 5
MemoryReader = Callable[[], dict[str, float] | None]
_METRIC = re.compile(r"^(?:\w*_)?(memory_resident_bytes|memory_allocated_bytes)"
                     r"(?:\{[^}]*\})?[ \t]+([0-9.eE+-]+)(?:[ \t]+-?\d+)?[ \t]*$", re.MULTILINE)
_METRICS_TIMEOUT_S = 5.0  # for the whole page: a server dripping bytes is no answer
# Qdrant's page is kilobytes (hundreds with many collections); a larger one is not its.
_METRICS_MAX_BYTES = 16 * 2**20
# Above 2**64 bytes no allocator counts: such a gauge is garbage, not a figure.
_MAX_BYTES_FIGURE = 2.0**64


@dataclass(frozen=True)
class ServerWatch:
    """What can be watched of a database server: ``pid`` (a process tree to sample),
    ``memory`` (reads the server's own memory figures, in bytes), or neither, with
    ``reason``. ``scope`` says what the pid's tree holds, ``metrics`` where the memory
    figures come from."""

    pid: int | None = None
    reason: str | None = None  # why no process is sampled (also set when memory is read)
    host: str | None = None
    scope: str | None = None
    memory: MemoryReader | None = None
    metrics: str | None = None

    @property
    def sampled(self) -> bool:
        return self.pid is not None or self.memory is not None

    def record(self) -> dict[str, Any]:
        """The stage's ``database.sampling`` (:class:`evalq.results.dbpart.ServerSampling`)."""
        how = "+".join(h for h, on in (("process", self.pid is not None),
                                        ("metrics", self.memory is not None)) if on)
        return {"sampled": self.sampled, "how": how or None, "reason": self.reason,
                "host": self.host, "pid": self.pid, "scope": self.scope,
                "metrics": self.metrics}


def own_process() -> ServerWatch:
    """A database inside evalq's own process (Qdrant's in-process shard)."""
    return ServerWatch(reason="in-process: the engine runs in evalq's own process, "
                              "beside the load generator")


def locality(host: str | None, hostaddr: str | None = None) -> tuple[bool, str]:
    """Whether a server reached at ``host`` (a name, an address, or a unix socket's
    folder; None or empty: libpq's default socket) and ``hostaddr`` (the address the
    connection used, when known) runs on this host, and how that was decided. Names
    other than ``localhost`` and this host's own name are not resolved: remote."""
    for value in (hostaddr, host):
        if value and _loopback_or_own(value):
            return True, f"{value} is an address of this host"
    if not host or host.startswith(("/", "@")):
        return True, f"unix socket {host or '(default)'}"
    name = host.strip("[]").lower()
    if name == "localhost" or name in (socket.gethostname().lower(),
                                       socket.getfqdn().lower()):
        return True, f"{host} names this host"
    return False, f"remote server {host}"


def _loopback_or_own(value: str) -> bool:
    try:
        address = ipaddress.ip_address(value.strip("[]").split("%")[0])
    except ValueError:
        return False
    return address.is_loopback or str(address) in _own_addresses()


def _own_addresses() -> set[str]:
    out: set[str] = set()
    try:
        interfaces = psutil.net_if_addrs()
    except (OSError, psutil.Error):
        return out
    for addresses in interfaces.values():
        for a in addresses:
            if a.family in (socket.AF_INET, socket.AF_INET6):
                out.add(a.address.split("%")[0])
    return out


# -- PostgreSQL ----------------------------------------------------------------------------

def postgres(conn: Any, postmaster: int | None, label: str) -> ServerWatch:
    """The watch of the PostgreSQL behind ``conn``: the embedded server's ``postmaster``
    when known, else (a ``dsn:``) the parent of this connection's backend when the
    server is on this host."""
    if postmaster is not None:
        return ServerWatch(pid=postmaster, host="this host (embedded)",
                           scope="the embedded postmaster and its backends")
    info = conn.info
    local, why = locality(info.host, getattr(info, "hostaddr", None))
    if not local:
        return ServerWatch(reason=why, host=info.host)
    backend = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
    pid, refused = _postmaster_of(backend)
    if pid is None:
        return ServerWatch(reason=f"{label} answers on this host ({why}), but {refused}",
                           host=info.host)
    return ServerWatch(pid=pid, host=info.host,
                       scope=f"the postmaster (pid {pid}) and all its backends ({why}): "
                             "other databases' and clients' work on that server included")


def _postmaster_of(backend: int) -> tuple[int | None, str]:
    """The postmaster of backend ``backend`` (its parent), or why there is none here."""
    try:
        process = psutil.Process(backend)
        parent = process.parent()
        named = _is_postgres(process) and parent is not None and _is_postgres(parent)
    except psutil.Error as exc:
        return None, (f"its backend pid {backend} is no process here "
                      f"({type(exc).__name__}): a forwarded port or a container?")
    if not named or parent is None:
        return None, (f"its backend pid {backend} is not a PostgreSQL backend here: a "
                      "forwarded port or a container?")
    return parent.pid, ""


def _is_postgres(process: psutil.Process) -> bool:
    try:
        return any(n in process.name().lower() for n in ("postgres", "postmaster"))
    except psutil.Error:
        return False


# -- Qdrant --------------------------------------------------------------------------------

def qdrant(url: str, headers: Mapping[str, str]) -> ServerWatch:
    """The watch of the Qdrant server at ``url``: its ``/metrics`` memory when it answers
    them, and its process when it listens on this host (in another process than
    evalq's)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    shown = without_password(url)
    metrics_url = url.rstrip("/") + "/metrics"
    reader = _metrics_reader(metrics_url, dict(headers))
    memory = reader if reader() is not None else None
    local, why = locality(host)
    pid: int | None = None
    if not local:
        reason = why
    else:
        pid = listening_pid(parts.port or (443 if parts.scheme == "https" else 80))
        if pid is None:
            reason = (f"no process here listens on {shown}'s port (or its owner cannot "
                      "be read): a forwarded port or a container?")
        elif pid == os.getpid():
            pid, reason = None, ("the server listens inside evalq's own process (a "
                                 "stand-in): its CPU would include the load generator's")
        else:
            reason = None
    if memory is not None and reason is not None:
        reason += f"; memory from {without_password(metrics_url)}"
    return ServerWatch(pid=pid, reason=reason, host=host, memory=memory,
                       scope=None if pid is None else f"the process listening at {shown}",
                       metrics=without_password(metrics_url) if memory else None)


def _metrics_reader(url: str, headers: dict[str, str]) -> MemoryReader:
    def read() -> dict[str, float] | None:
        deadline = time.monotonic() + _METRICS_TIMEOUT_S
        body = bytearray()
        try:
            with httpx.stream("GET", url, headers=headers, timeout=_METRICS_TIMEOUT_S) as r:
                if r.status_code != 200:
                    return None
                for chunk in r.iter_bytes():
                    body += chunk
                    if len(body) > _METRICS_MAX_BYTES or time.monotonic() > deadline:
                        return None
        except (httpx.HTTPError, httpx.InvalidURL):
            return None
        return memory_figures(body.decode("utf-8", errors="replace")) or None
    return read


def memory_figures(text: str) -> dict[str, float]:
    """Qdrant's memory gauges from a Prometheus page (any ``metrics_prefix``), in bytes.
    A gauge that is no byte count (negative, infinite, beyond 64 bits) is left out: it
    would be a step's peak (or an infinity the results file cannot hold)."""
    out: dict[str, float] = {}
    for name, value in _METRIC.findall(text):
        try:
            number = float(value)
        except ValueError:
            continue
        if math.isfinite(number) and 0 <= number < _MAX_BYTES_FIGURE:
            out[name] = number
    return out


def listening_pid(port: int) -> int | None:
    """The process listening on TCP ``port`` here (None: none, or not readable)."""
    try:
        conns = psutil.net_connections(kind="tcp")
    except (OSError, psutil.Error):
        return None
    for c in conns:
        if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port \
                and c.pid is not None:
            return int(c.pid)
    return None
