"""A tiny asyncio (aiohttp) server on 127.0.0.1 for load-generator tests, with injected
latency and errors.

It speaks just enough of the OpenAI ``/v1/embeddings``, ``/rerank``, ``/v1/models`` and
``/health`` routes for the generator (its vectors are constant, not embeddings, unless
``text_vectors``: then each text gets its own fixed vector, so rankings mean something;
``noise_above``/``noise`` degrade every answer once more than N requests have been in
flight at once: a server that stays degraded after it is pushed past N, which quality
under load must catch; sticky, so the test does not depend on how a loaded CI machine
happens to interleave the requests). Every behaviour
a test asserts on is injected and counted here, so a test can compare what the generator
saw with what the server did: ``delay_ms`` for every request, ``slow_every``/``slow_ms`` for a tail,
``fail_every`` for HTTP 500s, ``wrong_count`` for malformed answers, and the maximum
number of requests it held at once (an open-loop generator keeps sending while the
server is slow; a closed-loop one cannot exceed its concurrency).

Runs in a background thread (``LoadTestServer``) or as a process:
``python tests/support/load_test_server.py --port P [--delay-ms 5] [--die-after N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import zlib
from dataclasses import dataclass

import numpy as np
from aiohttp import web


@dataclass
class Behaviour:
    delay_ms: float = 0.0
    slow_every: int = 0  # every Nth request is slow
    slow_ms: float = 0.0
    fail_every: int = 0  # every Nth request answers 500
    wrong_count: bool = False
    die_after: int = 0  # exit the process after N answers (as a process only)
    dim: int = 2  # length of the constant vector (384 passes a MiniLM run's shape checks)
    text_vectors: bool = False  # a fixed vector per text (by its CRC) instead of a constant
    noise_above: int = 0  # add noise once more than this many have been in flight at once
    noise: float = 0.0  # the noise's size relative to the vector's norm


def vector(text: str, behaviour: Behaviour, noisy: bool, n: int) -> list[float]:
    if not behaviour.text_vectors:
        base = np.full(behaviour.dim, 0.5)
    else:
        base = np.random.default_rng(zlib.crc32(text.encode())).standard_normal(behaviour.dim)
    if noisy:
        jitter = np.random.default_rng(n).standard_normal(behaviour.dim)
        base = base + behaviour.noise * np.linalg.norm(base) / np.linalg.norm(jitter) * jitter
    return [float(x) for x in base]


class Counters:
    def __init__(self) -> None:
        self.requests = 0
        self.failed = 0
        self.slow = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.noisy = 0  # answers degraded by noise_above


def make_app(behaviour: Behaviour, counters: Counters) -> web.Application:
    async def answer(items: int, key: str, texts: list[str] | None = None) -> web.Response:
        counters.requests += 1
        n = counters.requests
        counters.in_flight += 1
        counters.max_in_flight = max(counters.max_in_flight, counters.in_flight)
        try:
            delay = behaviour.delay_ms
            if behaviour.slow_every and n % behaviour.slow_every == 0:
                delay += behaviour.slow_ms
                counters.slow += 1
            if delay:
                await asyncio.sleep(delay / 1000.0)
            if behaviour.fail_every and n % behaviour.fail_every == 0:
                counters.failed += 1
                return web.json_response({"error": "injected"}, status=500)
            if behaviour.wrong_count:
                items += 1
            if key == "data":
                noisy = bool(behaviour.noise_above
                             and counters.max_in_flight > behaviour.noise_above)
                counters.noisy += noisy
                texts = (texts or []) + [""] * items
                data = [{"index": i, "embedding": vector(texts[i], behaviour, noisy, n),
                         "object": "embedding"} for i in range(items)]
            else:
                data = [{"index": i, "relevance_score": 0.5} for i in range(items)]
            return web.json_response({key: data, "model": "test"})
        finally:
            counters.in_flight -= 1
            if behaviour.die_after and n >= behaviour.die_after:
                os._exit(0)

    async def embeddings(request: web.Request) -> web.Response:
        body = await request.json()
        return await answer(len(body["input"]), "data", list(body["input"]))

    async def rerank(request: web.Request) -> web.Response:
        body = await request.json()
        return await answer(len(body["documents"]), "results")

    async def health(_: web.Request) -> web.Response:
        return web.json_response({})

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "test", "max_model_len": 256,
                                            "stats": {"batch_size": 32}}]})

    app = web.Application()
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_post("/rerank", rerank)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    return app


class LoadTestServer:
    """The app in a daemon thread with its own event loop, on a free loopback port."""

    def __init__(self, behaviour: Behaviour | None = None) -> None:
        self.behaviour = behaviour or Behaviour()
        self.counters = Counters()
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._ready = threading.Event()
        self.port = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            self._runner = web.AppRunner(make_app(self.behaviour, self.counters),
                                         access_log=None)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self._ready.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()

    def __enter__(self) -> LoadTestServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            if self._runner is not None:
                await self._runner.cleanup()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--delay-ms", type=float, default=0.0)
    p.add_argument("--fail-every", type=int, default=0)
    p.add_argument("--die-after", type=int, default=0)
    p.add_argument("--dim", type=int, default=2)
    a = p.parse_args()
    behaviour = Behaviour(delay_ms=a.delay_ms, fail_every=a.fail_every, die_after=a.die_after,
                          dim=a.dim)
    web.run_app(make_app(behaviour, Counters()), host="127.0.0.1", port=a.port,
                access_log=None, print=None)


if __name__ == "__main__":
    main()
