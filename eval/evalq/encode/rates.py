"""Encoding rates measured on this host, kept beside the embedding cache.

A search grid's plan prints how long its encodings will take, before anything is
loaded. A constant guess is wrong by an order of magnitude either way: fp32 MiniLM on
two cores, an int8 graph on a VNNI CPU and a served model on a GPU differ that much. So
every run that computed embeddings writes what it measured (texts and the seconds spent
computing them, cache hits left out) to ``<cache_dir>/rates.json``, and the next plan
reads it.

A rate is keyed by what decides the speed of one encoding: the variant's engine identity
as the plan resolved it (backend, dtype, device, weights fingerprint, quantization,
encoding settings, arithmetic, endpoint), the numerics class and the cores of this host.
A rate measured elsewhere is never found (a cache copied from an AVX-512 host to an AVX2
one plans with the assumed rate until it has measured its own). The ledger is a hint for
the estimate only: it never changes a number a run reports, and a ledger that cannot be
read or written is ignored with a warning, not a failed run.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evalq.core.atomicio import write_json
from evalq.core.host import current_class

log = logging.getLogger(__name__)

LEDGER_NAME = "rates.json"
# Rates from fewer texts than this are mostly start-up (the first batch's warm-up), and
# would make the estimate of a large grid too pessimistic.
MIN_TEXTS = 32
# Slower than this is no measurement: MIN_TEXTS texts would have taken over a year. A
# hand-edited 5e-324 made the plan print "about inf s".
MIN_TEXTS_PER_S = 1e-6
# A ledger holds a couple of hundred bytes per engine identity and host: one larger than
# this is no ledger evalq wrote, and reading it whole would cost every plan its memory.
MAX_LEDGER_BYTES = 64 * 2**20


@dataclass(frozen=True)
class MeasuredRate:
    """Texts per second one variant encoded at on this host, and when."""

    texts_per_s: float
    texts: int
    measured: str  # ISO date and time, UTC
    numerics_class: str


def rate_key(identity: dict[str, Any], numerics_class: str | None = None,
             cores: int | None = None) -> str:
    """The ledger's key of one engine identity on this host (its class and cores)."""
    blob = json.dumps({"identity": identity,
                       "numerics_class": numerics_class or current_class(),
                       "cores": cores if cores is not None else os.cpu_count()},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:24]


class RateLedger:
    """``<cache_dir>/rates.json``: the last measured rate per engine identity and host."""

    def __init__(self, cache_dir: Path) -> None:
        self.path = Path(cache_dir) / LEDGER_NAME

    def _read(self) -> dict[str, Any]:
        try:
            if not self.path.exists():
                return {}
            if not self.path.is_file():  # a FIFO would block the plan until a writer came
                raise IsADirectoryError(f"{self.path} is not a regular file")
            if self.path.stat().st_size > MAX_LEDGER_BYTES:  # read whole, every plan
                raise ValueError(f"{self.path.stat().st_size} bytes, more than a ledger "
                                 f"of rates holds ({MAX_LEDGER_BYTES})")
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, RecursionError) as exc:
            log.warning(f"[evalq] ignoring the encoding-rate ledger {self.path} ({exc}); "
                        "the plan's estimate assumes a rate until a run measures one")
            return {}
        return data if isinstance(data, dict) else {}

    def lookup(self, identity: dict[str, Any]) -> MeasuredRate | None:
        """This identity's last rate on this host, or None (never measured, or unreadable;
        or an entry under this host's key that states another numerics class: copied or
        edited, so not a rate the plan may call measured on this host)."""
        return self.lookup_all([identity])[0]

    def lookup_all(self, identities: list[dict[str, Any]]) -> list[MeasuredRate | None]:
        """:meth:`lookup` of each identity from one read of the ledger (a damaged ledger
        warns once per plan, not once per weight variant)."""
        data, klass = self._read(), current_class()
        rates = [_entry_rate(data.get(rate_key(identity))) for identity in identities]
        return [r if r is not None and r.numerics_class == klass else None for r in rates]

    def record(self, identity: dict[str, Any], texts: int, seconds: float,
               variant: str) -> MeasuredRate | None:
        """Keep ``texts`` computed in ``seconds`` as this identity's rate (the latest
        measurement wins: an engine upgrade or a quieter machine is what the next plan
        will see). Too few texts, or no time, records nothing."""
        if texts < MIN_TEXTS or not 0 < seconds < math.inf:
            return None
        try:
            texts_per_s = texts / seconds
        except OverflowError:
            return None
        klass = current_class()
        rate = MeasuredRate(texts_per_s=texts_per_s, texts=int(texts),
                            measured=datetime.now(UTC).isoformat(timespec="seconds"),
                            numerics_class=klass)
        if _entry_rate(rate.__dict__) is None:
            return None
        # Only sound entries are kept: one NaN in the file (hand-edited, another tool) made
        # the JSON write refuse the whole ledger and failed the run after its variant.
        data = {key: entry for key, entry in self._read().items()
                if _entry_rate(entry) is not None}
        data[rate_key(identity, klass)] = {**rate.__dict__, "variant": variant}
        try:
            write_json(self.path, data)
        except OSError as exc:
            log.warning(f"[evalq] could not keep the encoding rate in {self.path} ({exc}); "
                        "later plans assume a rate instead")
            return None
        return rate

    def record_encodes(self, identity: dict[str, Any], encodes: list[dict[str, Any]],
                       variant: str) -> MeasuredRate | None:
        """Keep the rate of a run's ``encode`` entries (one per dataset: each side's
        counts, :class:`evalq.core.encodestats.EncodeStats` as stored): texts computed
        over seconds computing, both sides and every dataset together, cache hits and
        borrowed sides left out."""
        texts, seconds = 0, 0.0
        for entry in encodes:
            for side in ("documents", "queries"):
                stats = entry.get(side)
                if isinstance(stats, dict):
                    texts += int(stats.get("n_computed") or 0)
                    seconds += float(stats.get("seconds_computing") or 0.0)
        return self.record(identity, texts, seconds, variant)


def _entry_rate(entry: Any) -> MeasuredRate | None:
    """The rate one ledger entry states, or None when it states none a run could have
    measured (not a mapping, a missing field, a non-finite or implausible number)."""
    if not isinstance(entry, dict):
        return None
    try:
        texts_per_s, texts = float(entry["texts_per_s"]), float(entry["texts"])
        if not (MIN_TEXTS_PER_S <= texts_per_s < math.inf and MIN_TEXTS <= texts < math.inf):
            return None
        return MeasuredRate(texts_per_s=texts_per_s, texts=int(texts),
                            measured=str(entry["measured"]),
                            numerics_class=str(entry["numerics_class"]))
    except (KeyError, TypeError, ValueError, OverflowError):
        return None
