"""What ``evalq load``'s database stage samples of a database server (issue 30): the
decision local / remote without connecting anywhere, a remote ``dsn:`` server recorded
as not sampled (typed, and said so on the console instead of zeros), Qdrant's
``/metrics`` memory gauges read from a Prometheus page, and the process listening on a
loopback port found by that port.

The servers themselves are driven in test_vdb_load.py (the ``server`` tier)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace
from typing import Any

import pytest

from evalq.execute.load.dbwatch import DatabaseSampler, sampling_text, step_text, table_cells
from evalq.results.dbpart import DatabaseStage
from evalq.results.schema import LoadVariant
from evalq.retrieve import serverwatch


@pytest.mark.parametrize(("host", "hostaddr", "local"), [
    ("/tmp/evalq-pgvector-x/data", "", True),  # a unix socket's folder
    (None, None, True),  # libpq's default: the unix socket
    ("", "", True),
    ("localhost", "", True),
    ("127.0.0.1", "127.0.0.1", True),
    ("::1", "", True),
    ("[::1]", "", True),
    ("db.internal", "127.0.0.1", True),  # a name the connection reached on loopback
    ("db.example.com", "", False),  # a name is not resolved: remote
    ("db.example.com", "192.0.2.10", False),  # TEST-NET-1: no interface here has it
    ("192.0.2.10", "", False),
])
def test_which_servers_are_on_this_host(host: str | None, hostaddr: str | None,
                                        local: bool) -> None:
    found, why = serverwatch.locality(host, hostaddr)
    assert found is local, why
    if not local:
        assert why == f"remote server {host}"


class _RemoteConnection:
    """A psycopg connection's face for a server elsewhere: any query fails the test
    (deciding "remote" must not touch the server)."""

    info = SimpleNamespace(host="db.example.com", hostaddr="192.0.2.10", port=5432)

    def execute(self, *args: Any) -> Any:
        raise AssertionError("a remote server is not queried for its processes")


def test_a_remote_dsn_server_is_recorded_as_not_sampled() -> None:
    watch = serverwatch.postgres(_RemoteConnection(), None,
                                 "the PostgreSQL at postgresql://db.example.com/x")
    record = watch.record()
    assert record["sampled"] is False and record["reason"] == "remote server db.example.com"
    assert record["pid"] is None and record["how"] is None
    # typed, as the summary stores it
    stage = DatabaseStage.model_validate({"kind": "pgvector", "end_to_end": False,
                                          "sampling": record})
    assert stage.sampling is not None and not stage.sampling.sampled
    LoadVariant.model_validate({"backend": "inprocess", "database": stage.model_dump()})
    with DatabaseSampler(watch) as sampler:
        pass
    step = sampler.result
    assert step["sampled"] is False and step["reason"] == "remote server db.example.com"
    assert step["cpu_s"] is None and step["peak_rss_mb"] is None  # not zeros
    # the console says so instead of 0.00 cores and 0 MiB
    assert table_cells([{"server": step}, {"server": step}]) == ("remote", "remote")
    assert step_text(step) == "server not sampled (remote)"
    assert sampling_text(record) == ("server not sampled (remote): remote server "
                                     "db.example.com")


def test_a_damaged_sampling_record_is_refused() -> None:
    with pytest.raises(ValueError, match="sampled"):
        DatabaseStage.model_validate({"kind": "qdrant", "end_to_end": False,
                                      "sampling": {"how": "process"}})


def test_the_embedded_server_is_watched_by_its_postmaster() -> None:
    watch = serverwatch.postgres(_RemoteConnection(), 4321, "the embedded PostgreSQL")
    assert watch.pid == 4321 and watch.sampled and watch.record()["how"] == "process"


def test_qdrant_memory_gauges_are_read_from_a_prometheus_page() -> None:
    page = ("# HELP memory_resident_bytes Maximum number of bytes in physically resident\n"
            "# TYPE memory_resident_bytes gauge\n"
            "memory_resident_bytes 73400320\n"
            "memory_allocated_bytes 5.24288e+07\n"
            "memory_active_bytes 60000000\n"
            "rest_responses_total{method=\"GET\",endpoint=\"/metrics\"} 3\n")
    assert serverwatch.memory_figures(page) == {"memory_resident_bytes": 73400320.0,
                                                "memory_allocated_bytes": 52428800.0}
    # metrics_prefix: qdrant_, labels, a timestamp
    prefixed = 'qdrant_memory_resident_bytes{peer="1"} 1024 1700000000000\n'
    assert serverwatch.memory_figures(prefixed) == {"memory_resident_bytes": 1024.0}
    assert serverwatch.memory_figures("app_info 1\n") == {}


def test_a_metrics_only_step_keeps_the_peak_the_server_reported() -> None:
    readings = iter([{"memory_resident_bytes": 10 * 2**20},  # at the step's start
                     {"memory_resident_bytes": 30 * 2**20,  # at its end
                      "memory_allocated_bytes": 20 * 2**20}])
    watch = serverwatch.ServerWatch(reason="remote server q.example.com; memory from x",
                                    host="q.example.com",
                                    memory=lambda: next(readings, None),
                                    metrics="http://q.example.com:6333/metrics")
    with DatabaseSampler(watch, metrics_interval_s=3600) as sampler:  # no read between
        pass
    step = sampler.result
    assert step["sampled"] and step["cpu_s"] is None and step["peak_rss_mb"] is None
    assert step["reported_resident_mb"] == 30.0 and step["reported_allocated_mb"] == 20.0
    assert step["reports"] == 2
    assert table_cells([{"server": step}]) == ("-", "30")
    assert "30 MiB resident (its /metrics)" in step_text(step)
    assert "its allocator's, no CPU" in sampling_text(watch.record())


@pytest.mark.process
def test_the_process_listening_on_a_loopback_port_is_found() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c",
         "import socket, sys, time\n"
         "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
         "print(s.getsockname()[1], flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        assert serverwatch.listening_pid(port) == child.pid
    finally:
        child.kill()
        child.wait()
