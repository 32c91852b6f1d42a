"""Secrets never leave the process: every message, log line and stored error is redacted.

An API key is read from the environment variable a recipe names
(:func:`evalq.engines.http_common.read_api_key`), which registers its value here. A server
may echo request headers in an error body, and that body may end up in an exception, the
manifest or stderr; :func:`redact` replaces every registered value (and a bearer token in
any case) wherever text leaves evalq.
"""

from __future__ import annotations

import re
import threading
from typing import Any

_SECRETS: set[str] = set()
_LOCK = threading.Lock()
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}")
MASK = "***"


def register_secret(value: str | None) -> None:
    """Remember ``value`` so that :func:`redact` removes it (short values are ignored:
    masking a 1-3 character string would mangle ordinary text)."""
    if value and len(value) >= 4:
        with _LOCK:
            _SECRETS.add(value)


def redact(text: str) -> str:
    """``text`` with every registered secret and every bearer token replaced by ``***``."""
    with _LOCK:
        secrets = sorted(_SECRETS, key=len, reverse=True)
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return _BEARER.sub(lambda m: m.group(1) + MASK, text)


def redact_obj(value: object) -> object:
    """:func:`redact` applied to every string inside a JSON-like structure."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redact_obj(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_obj(v) for v in value]
    return value


def without_password(dsn: str) -> str:
    """A PostgreSQL connection string (URL or key=value form) with its password masked,
    for the plan, records and errors: the password is not a registered secret (it is
    part of a string the user wrote), so :func:`redact` would not find it."""
    dsn = re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", dsn)
    return re.sub(r"(password\s*=\s*)\S+", r"\1***", dsn)


def without_stored_password(dsn: str) -> str:
    """A connection string with its password left out (not masked), for what evalq
    writes to disk: a manifest and a certificate travel, and a password must not travel
    with them. Left out rather than masked, so that a later ``evalq verify`` or
    ``evalq certify`` that reconnects falls back to libpq's own ``PGPASSWORD`` or
    ``~/.pgpass`` instead of sending ``***``."""
    dsn = re.sub(r"(://[^:/@]+):[^@]*@", r"\1@", dsn)
    if "://" in dsn:  # a URL: password as a query parameter
        dsn = re.sub(r"([?&])password=[^&]*&?", r"\1", dsn).rstrip("?&")
        return dsn
    return re.sub(r"\s*\bpassword\s*=\s*('(?:[^'\\]|\\.)*'|\S+)", "", dsn)


def stored_recipe_form(recipe: dict[str, Any]) -> dict[str, Any]:
    """A recipe dump as evalq stores it: every ``dsn`` without its password
    (:func:`without_stored_password`); everything else as it was."""
    return {k: _stored(k, v) for k, v in recipe.items()}


def _stored(key: str, value: object) -> object:
    if key == "dsn" and isinstance(value, str):
        return without_stored_password(value)
    if isinstance(value, dict):
        return {k: _stored(k, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_stored("", v) for v in value]
    return value
