"""A server evalq starts from a recipe's ``load.launch`` command (e.g. Infinity), and stops.

The process runs in its own process group with the parent-death signal, exactly like
the managed vLLM server (``backends/vllm_server.py``), so a Ctrl-C, a crash or a kill of
evalq leaves nothing behind; its output goes to a log file in the results folder. A
server that never answers its health route is exit 2 naming the URL and the log; one
that exits during start-up is exit 2 with the log's own diagnosis when it has a known one
(:data:`STARTUP_DIAGNOSES`: a missing Infinity extra, a folder without an ONNX file).

The command's placeholders are :data:`evalq.engines.options.PLACEHOLDERS`, the one list
the recipe check and the docs read.
"""

from __future__ import annotations

import atexit
import os
import re
import socket
import subprocess
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from evalq.core.errors import InputError
from evalq.engines.options import EncoderVariant, LaunchCommand, used_placeholders
from evalq.engines.process_group import log_tail, pick_child_setup, stop_group, wait_healthy

_LIVE: weakref.WeakSet[LaunchedServer] = weakref.WeakSet()

# Start-up failures a server's log explains: (pattern, message, fix). The first match in
# the log of a server that exited replaces the generic "read the log".
STARTUP_DIAGNOSES: tuple[tuple[str, str, str], ...] = (
    (r"optimum\.onnxruntime is not available",
     "the server needs Infinity's optimum extra (optimum, onnxruntime) for --engine optimum, "
     "and its environment lacks it",
     "run 'make infinity-venv' (it installs infinity-emb[server,torch,optimum]), or "
     "pip install 'infinity-emb[optimum]' into the launch command's venv"),
    (r"No onnx files found for|Could not find any ONNX",
     "the server found no usable ONNX file in its --model-id folder",
     "serve evalq's graph: set load.launch.<variant>.onnx_from to an onnx variant and pass "
     "--model-id . with cwd: '{onnx_dir}' (see docs/load-testing.md)"),
)


def _stop_all() -> None:
    for server in list(_LIVE):
        server.close()


atexit.register(_stop_all)


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


class LaunchedServer:
    def __init__(self, command: Sequence[str], *, url: str, health: str, log_path: Path,
                 startup_timeout_s: float, env: Mapping[str, str] | None = None,
                 cwd: Path | None = None, served: Mapping[str, Any] | None = None,
                 field: str = "load.launch") -> None:
        self.command = list(command)
        # A relative program path is the user's (the recipe's folder of work), not cwd's.
        if cwd is not None and "/" in self.command[0] and not os.path.isabs(self.command[0]):
            self.command[0] = os.path.abspath(self.command[0])
        self.cwd = cwd
        self.served = dict(served or {})  # what evalq put in the server's folder, if anything
        self.field = field  # the recipe field a start-up failure points at
        self.url = url.rstrip("/")
        self.health = health
        self.log_path = log_path
        self.startup_timeout_s = startup_timeout_s
        self.env = dict(env or {})
        self.process: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> LaunchedServer:
        parts = urlsplit(self.url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        if port_in_use(host, port):
            raise InputError(
                message=f"{self.url} already answers before evalq started its server: "
                "another process holds the port",
                field="http.url",
                fix="stop that process, or pick a free port in the variant's http.url",
            )
        if self.cwd is not None and not self.cwd.is_dir():
            raise InputError(message=f"the launch's working folder '{self.cwd}' does not exist",
                             file=self.cwd, field=self.field.replace(".command", ".cwd"),
                             fix="point cwd at an existing folder (e.g. '{onnx_dir}')")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.env}
        env.setdefault("HF_HUB_OFFLINE", "1")
        started = time.perf_counter()
        with self.log_path.open("ab") as log:
            log.write(f"$ {' '.join(self.command)}\n".encode())
            log.flush()
            try:
                self.process = subprocess.Popen(
                    self.command, stdin=subprocess.DEVNULL, stdout=log,
                    stderr=subprocess.STDOUT, env=env, cwd=self.cwd,
                    preexec_fn=pick_child_setup())
            except OSError as exc:
                raise InputError(message=f"cannot start '{self.command[0]}': {exc}",
                                 field="load.launch.command",
                                 fix="check the command path (e.g. run 'make infinity-venv' "
                                 "for .venv-infinity)") from None
        _LIVE.add(self)
        try:
            self._wait_healthy()
        except BaseException:
            self.close()
            raise
        self.startup_s = time.perf_counter() - started
        return self

    def _wait_healthy(self) -> None:
        assert self.process is not None
        wait_healthy(self.process, self.url, self.health, self.startup_timeout_s,
                     exited=self._exited,
                     timed_out=lambda: InputError(
                         message=f"the server at {self.url} did not answer {self.health} "
                         f"within {self.startup_timeout_s:.0f} s", file=self.log_path,
                         field="load.launch.startup_timeout_s",
                         fix=f"read the server log {self.log_path}; raise startup_timeout_s "
                         "for a slow start"))

    def _exited(self, code: int) -> InputError:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            text = ""
        for pattern, message, fix in STARTUP_DIAGNOSES:
            if re.search(pattern, text):
                return InputError(message=f"the server for {self.url} exited with code {code} "
                                  f"during start-up: {message}", file=self.log_path,
                                  field=self.field, fix=fix)
        return InputError(message=f"the server for {self.url} exited with code {code} during "
                          f"start-up: {self.log_tail(3)}", file=self.log_path,
                          field="load.launch", fix=f"read the server log {self.log_path}")

    def log_tail(self, lines: int = 20) -> str:
        return log_tail(self.log_path, lines)

    def close(self, timeout_s: float = 15.0) -> None:
        process, self.process = self.process, None
        _LIVE.discard(self)
        if process is None:
            return
        stop_group(process, timeout_s, linger_s=3.0)


def start_launch(spec: LaunchCommand | None, variant: EncoderVariant, model_path: Path,
                 logs_dir: Path, *, onnx_dir: Path | None = None,
                 served: Mapping[str, Any] | None = None) -> LaunchedServer | None:
    """Start the server ``spec`` (the recipe's ``load.launch`` entry for ``variant``, or
    None) describes, if any.

    ``evalq run`` and ``evalq parity`` call this too, so a recipe that launches (say)
    Infinity gets its quality verdict from the same server the load test drives.
    ``onnx_dir`` fills ``{onnx_dir}`` (``served`` is its record, for the results).
    """
    if spec is None or variant.http is None:
        return None
    parts = urlsplit(variant.http.url)
    fill = {"model_path": str(model_path), "port": str(parts.port or 80),
            "host": parts.hostname or "127.0.0.1"}
    if onnx_dir is not None:
        fill["onnx_dir"] = str(onnx_dir)
    missing = sorted(set(used_placeholders([*spec.command, spec.cwd or ""])) - set(fill))
    if missing:  # the recipe check refuses this first; kept for API callers
        raise InputError(message=f"load.launch.{variant.name} uses {{{missing[0]}}}, which "
                         "this command cannot fill", field=f"load.launch.{variant.name}",
                         fix="set load.launch.<variant>.onnx_from to an onnx variant")
    command = [arg.format(**fill) for arg in spec.command]
    cwd = Path(spec.cwd.format(**fill)) if spec.cwd else None
    root = variant.http.url.rstrip("/").removesuffix("/v1")
    server = LaunchedServer(command, url=root, health=spec.health,
                            log_path=Path(logs_dir) / f"{variant.name}.log",
                            startup_timeout_s=spec.startup_timeout_s, env=spec.env,
                            cwd=cwd, served=served,
                            field=f"load.launch.{variant.name}.command")
    return server.start()
