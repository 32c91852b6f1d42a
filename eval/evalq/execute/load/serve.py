"""Start (or attach to) one load-tested variant's server, and stop it again.

vLLM variants get the OpenAI-compatible server ``evalq run`` would start (whatever mode
``run`` used: a load test needs a server); ``openai`` / ``tei`` variants are attached to
at their URL, after the recipe's ``load.launch`` command (if any) started them.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from evalq.core.errors import InputError
from evalq.engines.context import BuildContext
from evalq.engines.factory import create_encoder, resolve_device
from evalq.engines.launch import start_launch
from evalq.engines.options import EncoderVariant, VllmOptions
from evalq.engines.quantize.derive import CalibrationSource
from evalq.engines.registry import embedding_backend
from evalq.engines.vllm_build import build_vllm_encoder
from evalq.engines.vllm_server import vllm_request_fields
from evalq.execute.load.sweep import Endpoint
from evalq.execute.served_graph import served_graph
from evalq.plan.load import LoadSection
from evalq.plan.types import Plan
from evalq.results.load import LoadFolder


@dataclass
class Served:
    endpoint: Endpoint
    encoder: Any  # for the parity texts (None when parity is off for a plain HTTP server)
    describe: dict[str, Any]


@contextlib.contextmanager
def serve(variant: EncoderVariant, resolved: Plan, folder: LoadFolder,
          section: LoadSection, calibration: CalibrationSource | None = None,
          ) -> Iterator[Served]:
    """Start (or attach to) one variant's server; stop it on the way out. ``calibration``
    feeds a static quantization method whose graph ``{onnx_dir}`` serves and that the
    cache does not hold yet."""

    planned = resolved.variant(variant.name)
    model_path, settings = planned.model_folder(), planned.encoding_settings()
    # an HTTP server's device is its own business (and resolving "auto" imports torch)
    backend = embedding_backend(variant.backend)
    device = resolve_device(variant.device) if backend.serving == "engine" else "cpu"
    ctx = BuildContext(model_path=model_path, settings=settings, logs_dir=folder.logs,
                       device=device, cache_dir=resolved.work_dir)
    launched, reachable = None, None
    if backend.serving == "engine":  # vLLM: evalq starts its OpenAI-compatible server

        opts = variant.vllm or VllmOptions()
        if opts.mode != "server":  # a load test needs a server, whatever `run` used
            variant = variant.model_copy(update={"vllm": opts.model_copy(
                update={"mode": "server"})})
        encoder = build_vllm_encoder(variant, ctx)
        inner: Any = getattr(encoder, "_inner", encoder)
        server = getattr(inner, "server", None)
        url = server.url if server is not None else inner.url
        model = server.served_model_name if server is not None else inner.model
        endpoint = Endpoint(variant.name, url, "openai", model, vllm_request_fields(settings),
                            pid=server.pid if server is not None else None,
                            alive=server.alive if server is not None else None)
    else:
        graph = served_graph(resolved, planned, calibration)
        launched = start_launch(planned.launch, variant, model_path, folder.logs,
                                onnx_dir=graph.onnx_dir, served=graph.record)
        http = variant.http
        assert http is not None
        # The client (and its tokenizer: transformers takes ~1 min to import on a busy
        # 2-core machine) is only needed for the parity texts.
        encoder = None
        try:
            if section.parity:
                encoder = create_encoder(variant, ctx)
        except BaseException:
            if launched is not None:
                launched.close()
            raise
        reachable = http.url
        url = http.url.rstrip("/").removesuffix("/v1")
        model = http.model or str(model_path)
        endpoint = Endpoint(variant.name, url, backend.load_api or "openai",
                            model, {}, pid=launched.pid if launched else None,
                            alive=launched.alive if launched else None)
    try:
        if reachable is not None:  # a plain HTTP server: is it there at all?
            check_reachable(variant.name, reachable, section.timeout_s)
        describe: dict[str, Any] = (
            encoder.describe() if encoder is not None else
            {"backend": variant.backend, "url": endpoint.url, "model": endpoint.model})
        if launched is not None:
            describe["launched"] = {"command": launched.command, "log": str(launched.log_path),
                                    "startup_s": launched.startup_s}
            if launched.served:  # an evalq graph (onnx_from): which one, from which variant
                describe["launched"]["served_graph"] = launched.served
        yield Served(endpoint, encoder, describe)
    finally:
        if encoder is not None:
            encoder.close()
        if launched is not None:
            launched.close()


def check_reachable(name: str, url: str, timeout_s: float) -> None:
    """Refuse (exit 2) a URL where nothing listens, before parity, probes or any level:
    otherwise every request failed and the run ended in exit 1 'server errors 100% >
    error budget', as if the server were overloaded. A connect that only times out is
    left to the sweep (a busy server is what a load test measures)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "localhost", port),
                                      timeout=timeout_s):
            pass
    except TimeoutError:
        return
    except OSError as exc:
        raise InputError(
            message=f"variant '{name}': nothing answers at {url} ({exc.strerror or exc}); "
                    "no load level was run",
            field="http.url",
            fix="start the server (or a load.launch command that starts it), or correct "
                "the variant's http.url") from exc
