"""One connection to a team's Qdrant server through qdrant-client (REST), and how its
failures become the user's faults (exit 2, naming the recipe field).

Two parts of evalq talk to a Qdrant server: ``kind: qdrant`` with ``url:``
(:mod:`evalq.retrieve.qdrant_server`, which builds and searches a collection) and
``documents: {qdrant: {url: ...}}`` (:mod:`evalq.retrieve.stored_vectors`, which reads
the vectors a deployment already holds). Both meet the same faults: a server that does
not answer or stops answering mid-run, an API key it refuses or that is not set, a
request it refuses (HTTP 400 / 422), a collection that is gone. One class maps them, so
a fault reads the same, and names the same kind of field, wherever it happens.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import httpx

from evalq.core.errors import InputError, MissingExtraError
from evalq.core.redact import redact, register_secret, without_password
from evalq.retrieve.qdrant_options import DEFAULT_TIMEOUT_S
from evalq.retrieve.serverwatch import ALIVE_TIMEOUT_S


class QdrantConnection:
    """A qdrant-client connected to ``url`` (its version read once, so a dead server is
    found here); ``where`` is the recipe path its fields hang under (``url``,
    ``api_key_env``, ``collection``). ``gone_fix``: what to do when the collection
    vanishes mid-run; ``build_field``: which option a refused build request names."""

    def __init__(self, url: str, api_key_env: str | None, timeout: int | None,
                 where: str, *, needed_for: str, gone_fix: str = "rerun",
                 build_field: Callable[[str], str] | None = None) -> None:
        self.where, self.url = where, url
        self.label = f"the Qdrant server at {without_password(url)}"
        self.collection = ""  # named in a vanished collection's message
        self._gone_fix, self._build_field = gone_fix, build_field
        self.qc, self.exc = qdrant_client(needed_for)
        api_key = self._api_key(api_key_env)
        # what qdrant-client sends, for the requests evalq makes itself (GET /metrics)
        self.headers = {} if api_key is None else {"api-key": api_key}
        self.client = self.qc.QdrantClient(
            url=url, api_key=api_key, prefer_grpc=False,
            timeout=timeout or DEFAULT_TIMEOUT_S, check_compatibility=False)
        try:
            self.version = str(self.call("url", self.client.info).version)
        except BaseException:
            self.client.close()
            raise

    def _api_key(self, name: str | None) -> str | None:
        if name is None:
            return None
        value = os.environ.get(name, "")
        if not value:
            raise InputError(message=f"the environment variable {name} (api_key_env) is "
                                     "not set or empty", field=f"{self.where}.api_key_env",
                             fix=f"export {name}=<your Qdrant API key> before the run, or "
                                 "leave api_key_env out for a server without one")
        register_secret(value)
        return value

    def close(self) -> None:
        self.client.close()

    def answers(self) -> bool:
        """Whether the server answers ``GET /`` (its version page) within
        :data:`ALIVE_TIMEOUT_S`: a fresh connection, so a pooled one a dead server left
        half-open does not answer for it. A 5xx is no answer."""
        try:
            reply = httpx.get(self.url.rstrip("/") + "/", headers=self.headers,
                              timeout=ALIVE_TIMEOUT_S)
        except httpx.HTTPError:
            return False
        return reply.status_code < 500

    def call(self, refused_field: str, request: Any, *args: Any, **kwargs: Any) -> Any:
        """``request(*args, **kwargs)``, with the client's failures as exit 2: no answer
        (refused, timed out, died mid-run) names ``url``; an API key refused names
        ``api_key_env``; an option refused (HTTP 400 / 422) names ``refused_field``
        (``build``: the build-time option the server's message names)."""
        try:
            return request(*args, **kwargs)
        except self.exc.UnexpectedResponse as exc:
            raise self.refused(exc, refused_field) from None
        except (self.exc.ResponseHandlingException, OSError) as exc:
            raise self.unreachable(exc) from None
        except json.JSONDecodeError as exc:  # a 200 whose body is no JSON: not Qdrant
            raise self.not_qdrant(exc) from None

    def not_qdrant(self, exc: json.JSONDecodeError) -> InputError:
        """A server that answered, but not in JSON (a web page, another service on the
        port): qdrant-client lets the decoder's error through, which is no bug of evalq's
        but a url that names something other than Qdrant's REST API."""
        body = redact(" ".join(exc.doc[:80].split()))
        return InputError(message=f"{self.label} answered, but not as Qdrant's REST API "
                                  f"does (no JSON: {body!r})", field=f"{self.where}.url",
                          fix="give the Qdrant server's REST address (port 6333 unless "
                              "it was changed; 6334 is gRPC, which evalq does not use)")

    def unreachable(self, exc: Exception) -> InputError:
        source = getattr(exc, "source", exc)
        why = redact(f"{type(source).__name__}: {first_line(source)}")
        timeout = "timed out" in why.lower() or "Timeout" in why
        kept = ("the collections already uploaded stay on the server, and the rerun "
                "reuses them (or resumes an interrupted upload) instead of uploading again")
        fix = ("check that the server is up and url (scheme, host, port) is right"
               + ("; raise timeout if the server is slow" if timeout else "")
               + f", then rerun: {kept}")
        return InputError(message=f"{self.label} did not answer ({why})",
                          field=f"{self.where}.url", fix=fix)

    def refused(self, exc: Any, field: str) -> InputError:
        status = exc.status_code
        try:
            said = str(exc.structured()["status"]["error"])
        except (ValueError, KeyError, TypeError):
            said = first_line(exc)
        said = redact(said)[:300]
        if status in (401, 403):
            return InputError(message=f"{self.label} refused the API key (HTTP {status}: "
                                      f"{said})", field=f"{self.where}.api_key_env",
                              fix="set api_key_env to the variable holding this server's "
                                  "key, and check the key")
        if status is not None and status >= 500:
            return self.unreachable(exc)
        if status == 404:
            return InputError(message=f"the collection '{self.collection}' is gone from "
                                      f"{self.label} ({said})",
                              field=f"{self.where}.collection", fix=self._gone_fix)
        if field == "build" and self._build_field is not None:
            field = self._build_field(said.lower())
        return InputError(message=f"{self.label} refused {field} (HTTP {status}: {said})",
                          field=f"{self.where}.{field}",
                          fix=f"use a value of {field} that this server accepts (see its "
                              f"message and its version, {getattr(self, 'version', '?')})")


def qdrant_client(needed_for: str) -> tuple[Any, Any]:
    """qdrant-client and its HTTP exceptions (the ``vdb`` extra)."""
    try:
        import qdrant_client
        from qdrant_client.http import exceptions
    except ImportError as exc:
        raise MissingExtraError("qdrant-client", "vdb", needed_for) from exc
    return qdrant_client, exceptions


def first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines or [type(exc).__name__])[0][:200]
