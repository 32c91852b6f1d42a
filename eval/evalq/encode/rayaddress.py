"""A Ray cluster address, checked before Ray is asked to connect to it.

``ray.init(address=...)`` takes ``auto`` (the cluster this machine belongs to),
``local`` (start one here), ``host:port`` (a cluster's GCS) or ``ray://host:port`` (Ray
Client). Anything else, and an address nothing answers on, used to reach Ray and fail
there after its own long timeout (``ConnectionError: ray client connection timeout``,
exit 3). So the form is checked when the recipe is read (:func:`address_problem`, the
same rule for ``--address``), and :func:`unreachable` tries one TCP connection with a
short timeout before the run starts: an address nothing listens on is exit 2, naming it.
"""

from __future__ import annotations

import re
import socket

KEYWORDS = ("auto", "local")
PROBE_TIMEOUT_S = 3.0
_HOST_PORT = re.compile(r"^(?:\[(?P<ip6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9.\-_]+)):"
                        r"(?P<port>[0-9]{1,5})$")
FORMS = "auto, local, host:port (the cluster's GCS) or ray://host:port (Ray Client)"


def host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of an address with one, else None (``auto`` / ``local`` / bad)."""
    rest = address.removeprefix("ray://")
    match = _HOST_PORT.match(rest)
    if match is None:
        return None
    port = int(match["port"])
    if not 0 < port < 65536:
        return None
    return (match["ip6"] or match["host"]), port


def address_problem(address: str) -> str | None:
    """Why ``address`` is not a form ``ray.init`` takes, or None."""
    if address in KEYWORDS or host_port(address) is not None:
        return None
    return f"'{address}' is not a Ray address; use {FORMS}"


def unreachable(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Why nothing answers at ``address`` (one TCP connection), or None when something
    does, or when the address has no host to try (``auto``, ``local``)."""
    target = host_port(address)
    if target is None:
        return None
    try:
        with socket.create_connection(target, timeout=timeout_s):
            return None
    except OSError as exc:
        return (f"nothing answers at Ray address '{address}' "
                f"({exc.strerror or type(exc).__name__} within {timeout_s:g} s)")
