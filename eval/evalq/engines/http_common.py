"""Retries, backoff, failure classification and request concurrency for the HTTP clients.

The OpenAI-compatible and TEI clients differ in their payloads, not in how they fail:
a server that refuses connections, times out, answers 429 or 5xx is retried with
exponential backoff; what is left after the retries is classified once, here, into

- :class:`~evalq.core.errors.InputError` when the server never answered this client (a wrong
  URL, a server that is not running, a port that accepts but never replies): the user's
  recipe points at something that does not work, exit 2;
- :class:`~evalq.core.errors.BackendUnavailableError` when it answered before and stopped
  (the server died mid-run): ``encode.py`` keeps the finished cache chunks and a rerun
  resumes.

Retries are declared with tenacity (exponential backoff with jitter, so many clients do
not retry in lockstep), and a server's ``Retry-After`` (seconds or an HTTP date, capped at
60 s) is honoured in place of the computed pause.

The API key lives in the ``Authorization`` header of the underlying ``httpx.Client`` and
nowhere else: not in ``repr``, messages, exceptions or anything this module returns.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from evalq.core.errors import BackendUnavailableError, InputError
from evalq.core.redact import redact, register_secret
from evalq.engines.server_routes import ServerRoutes, not_found_error, server_routes

T = TypeVar("T")
R = TypeVar("R")

RETRY_STATUS = frozenset({408, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    """How long to wait for one answer and how often to try again."""

    timeout_s: float = 120.0
    retries: int = 3  # attempts after the first one
    backoff_s: float = 0.5  # first pause; doubles each retry

    max_pause_s: float = 30.0

    def pause_s(self, attempt: int) -> float:
        """Pause before retry ``attempt + 1`` without jitter (the jitter's base)."""
        return min(self.max_pause_s, self.backoff_s * (2**attempt))


class _Retryable(Exception):
    """One failed attempt worth repeating; ``cause`` is a short human description."""

    def __init__(self, cause: str, retry_after: float | None = None) -> None:
        super().__init__(cause)
        self.cause = cause
        self.retry_after = retry_after


MAX_RETRY_AFTER_S = 60.0


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        from datetime import datetime, timezone

        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - datetime.now(timezone.utc)).total_seconds()
    if seconds != seconds:  # NaN
        return None
    return max(0.0, min(MAX_RETRY_AFTER_S, seconds))


def read_api_key(env_var: str | None) -> str | None:
    """The API key from the environment variable a recipe names (never the key itself)."""
    if env_var is None:
        return None
    key = os.environ.get(env_var)

    register_secret(key)
    if not key:
        raise InputError(
            message=f"the API key environment variable '{env_var}' is not set or empty",
            field="api_key_env",
            fix=f"export {env_var}=... before running, or remove api_key_env from the recipe",
        )
    return key


def _describe_transport_error(exc: httpx.TransportError) -> str:
    if isinstance(exc, httpx.ConnectError):
        return f"connection failed ({exc.__class__.__name__}: {exc})"
    if isinstance(exc, httpx.TimeoutException):
        return f"no answer within the timeout ({exc.__class__.__name__})"
    return f"transport error ({exc.__class__.__name__}: {exc})"


class HttpJsonClient:
    """JSON GET/POST against one base URL with retries, backoff and failure classification.

    Thread-safe: ``httpx.Client`` is, and the only mutable state (whether the server ever
    answered) is guarded by a lock. One instance per backend.
    """

    def __init__(
        self,
        base_url: str,
        *,
        policy: RetryPolicy,
        api_key: str | None = None,
        concurrency: int = 1,
    ) -> None:
        if concurrency < 1:
            raise InputError(
                message=f"concurrency must be at least 1, got {concurrency}",
                field="concurrency",
                fix="set concurrency to 1 or more",
            )
        self.base_url = base_url.rstrip("/")
        self.policy = policy
        self.concurrency = concurrency
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(policy.timeout_s),
            limits=httpx.Limits(max_connections=max(concurrency, 1) + 1),
        )
        self._answered = False
        self._lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:  # no headers: the key must never be printed
        return f"HttpJsonClient({self.base_url!r}, concurrency={self.concurrency})"

    @property
    def answered(self) -> bool:
        """Whether the server has answered this client at least once."""
        with self._lock:
            return self._answered

    def get_json(self, path: str) -> Any:
        return self._request("GET", path, None)

    def post_json(self, path: str, payload: Mapping[str, Any]) -> Any:
        return self._request("POST", path, payload)

    def map_concurrent(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        """``[fn(x) for x in items]`` with at most ``concurrency`` requests in flight, in order."""
        if self.concurrency == 1 or len(items) <= 1:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(items))) as pool:
            return list(pool.map(fn, items))

    def server_routes(self) -> ServerRoutes:
        """The routes and models the server lists."""
        return server_routes(self._client)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._client.close()

    # -- internals ---------------------------------------------------------------------------

    def _wait(self, state: Any) -> float:
        exc = state.outcome.exception() if state.outcome is not None else None
        if isinstance(exc, _Retryable) and exc.retry_after is not None:
            return exc.retry_after
        base = self.policy.pause_s(state.attempt_number - 1)
        return base + random.uniform(0, base)  # full jitter on top of the exponential base

    def _request(self, method: str, path: str, payload: Mapping[str, Any] | None) -> Any:
        from tenacity import RetryError, Retrying, retry_if_exception_type, stop_after_attempt

        url = f"{self.base_url}{path}"
        retrying = Retrying(
            retry=retry_if_exception_type(_Retryable),
            stop=stop_after_attempt(self.policy.retries + 1),
            wait=self._wait,
            sleep=time.sleep,
        )
        try:
            return retrying(self._attempt, method, path, payload, url)
        except RetryError as err:
            last = err.last_attempt.exception()
            last_cause = last.cause if isinstance(last, _Retryable) else str(last)
        tries = self.policy.retries + 1
        if self.answered:
            raise BackendUnavailableError(
                f"{url} stopped answering after {tries} attempts: {last_cause}. Finished "
                "embedding chunks are kept in the cache; rerun the same command to resume."
            )
        raise InputError(
            message=f"cannot reach {url} after {tries} attempts: {last_cause}",
            field="url",
            fix="check that the server is running and that the recipe's url, port and path "
            "are right (and raise timeout_s for a slow server)",
        )

    def _attempt(
        self, method: str, path: str, payload: Mapping[str, Any] | None, url: str
    ) -> Any:
        try:
            response = self._whole_answer(method, path, payload)
        except httpx.TransportError as exc:
            raise _Retryable(_describe_transport_error(exc)) from None
        if response.status_code in RETRY_STATUS:
            raise _Retryable(f"HTTP {response.status_code}: {_body_excerpt(response)}",
                             parse_retry_after(response.headers.get("retry-after")))
        with self._lock:
            self._answered = True
        if response.status_code in (401, 403):
            raise InputError(
                message=f"{url} refused the credentials (HTTP {response.status_code})",
                field="api_key_env",
                fix="check the API key in the environment variable the recipe names",
            )
        if response.status_code == 404:  # say which routes the server does answer
            raise not_found_error(self._client, url, path, _body_excerpt(response, 120))
        if response.status_code >= 400:
            raise InputError(
                message=f"{url} rejected the request (HTTP {response.status_code}): "
                f"{_body_excerpt(response)}",
                field="url",
                fix="check the model name and the request options in the recipe",
            )
        try:
            return response.json()
        except ValueError:
            raise InputError(
                message=f"{url} answered with something that is not JSON: "
                f"{_body_excerpt(response)}",
                field="url",
                fix="point the recipe at the server's API root",
            ) from None


    def _whole_answer(self, method: str, path: str, payload: Mapping[str, Any] | None,
                      ) -> httpx.Response:
        """The response, its whole body read within ``timeout_s`` of the request.

        httpx's timeout bounds each read of the socket, not the answer: a server that
        sends a few bytes every few seconds (a proxy stuck behind a dying backend) was
        waited for without end. Reading the body in chunks against one deadline makes
        ``timeout_s`` what the recipe says it is. (A server that drips its headers is
        still bounded per read only.)"""
        deadline = time.monotonic() + self.policy.timeout_s
        with self._client.stream(method, path, json=payload) as response:
            chunks = []
            for chunk in response.iter_bytes():
                chunks.append(chunk)
                if time.monotonic() > deadline:
                    raise _Retryable(f"no whole answer within timeout_s "
                                     f"({self.policy.timeout_s:g} s): the server sent "
                                     f"{sum(map(len, chunks))} bytes of it so far")
            decoded = [(k, v) for k, v in response.headers.multi_items()
                       if k.lower() not in ("content-encoding", "content-length",
                                            "transfer-encoding")]
            return httpx.Response(response.status_code, headers=decoded,
                                  content=b"".join(chunks), request=response.request)


def _body_excerpt(response: httpx.Response, limit: int = 300) -> str:

    # A server may echo the request headers (the API key) in its error body.
    text = redact(response.text.strip().replace("\n", " "))
    return text[:limit] + ("..." if len(text) > limit else "")


def split_batches(items: Sequence[T], size: int) -> list[Sequence[T]]:
    """Consecutive slices of at most ``size`` items (the server's maximum client batch)."""
    if size < 1:
        raise InputError(
            message=f"max_batch must be at least 1, got {size}",
            field="max_batch",
            fix="set max_batch to 1 or more",
        )
    return [items[i : i + size] for i in range(0, len(items), size)]
