"""Measures as typed values, parsed once from strings (ir_measures' habit).

What a measure *is* (family, cutoff, parameters, direction) lives here; what computes it
is registered by the module that owns the computation (``judged.py`` for measures against
qrels, ``reference.py`` for measures against the reference run). A registry, not an
if/elif chain over names.

Grammar: ``Family[(param=value,...)][@cutoff]``, e.g. ``nDCG@10``, ``R@100``,
``RBO(p=0.9)@100``, ``overlap@10``. Aliases (``ndcg_cut_10``, ``recall_100``,
``MRR@10``, ``MAP@100``) map onto canonical families.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from evalq.core.errors import InputError
from evalq.core.ranges import RANGES

Against = Literal["qrels", "reference", "reranker"]
MAX_CUTOFF = 10_000  # of any measure


@dataclass(frozen=True)
class Family:
    """A kind of measure. ``compute`` is set by the owning module at import time."""

    name: str  # canonical spelling, e.g. "nDCG"
    against: Against
    needs_cutoff: bool
    higher_is_better: bool = True
    defaults: tuple[tuple[str, float], ...] = ()
    description: str = ""
    aliases: tuple[str, ...] = ()

    @property
    def bounds(self) -> tuple[float, float] | None:
        """The range of every per-query value (declared in :mod:`evalq.core.ranges`, where
        the results readers, which do not import this registry, find it too)."""
        return RANGES.get(self.name)


@dataclass(frozen=True, order=True)
class Measure:
    family: str
    cutoff: int | None = None
    params: tuple[tuple[str, float], ...] = field(default=())

    @property
    def spec(self) -> Family:
        return FAMILIES[self.family]

    @property
    def against(self) -> Against:
        return self.spec.against

    @property
    def higher_is_better(self) -> bool:
        return self.spec.higher_is_better

    def param(self, name: str) -> float:
        return dict(self.params)[name]

    @property
    def name(self) -> str:
        text = self.family
        non_default = [(k, v) for k, v in self.params if (k, v) not in self.spec.defaults]
        if non_default:
            text += "(" + ",".join(f"{k}={v:g}" for k, v in non_default) + ")"
        if self.cutoff is not None:
            text += f"@{self.cutoff}"
        return text

    def __str__(self) -> str:
        return self.name


FAMILIES: dict[str, Family] = {}
_ALIASES: dict[str, str] = {}  # lower-cased alias or canonical name -> canonical name
# Alias patterns without "@", e.g. trec_eval's "ndcg_cut_10": regex -> canonical family.
_PATTERN_ALIASES: list[tuple[re.Pattern[str], str]] = []
COMPUTE: dict[str, Callable[..., Any]] = {}


def register_family(family: Family) -> Family:
    """Add a measure family; a second registration of a name, or an alias (any case)
    that another family already answers to, is refused: it would silently change what
    an existing measure string means."""
    if family.name in FAMILIES:
        raise ValueError(f"measure family '{family.name}' is already registered")
    spellings = {alias.lower() for alias in (family.name, *family.aliases)}
    taken = sorted(a for a in spellings if a in _ALIASES)
    if taken:
        raise ValueError(f"measure family '{family.name}': {', '.join(taken)} already "
                         f"name(s) family {_ALIASES[taken[0]]}")
    FAMILIES[family.name] = family
    for alias in spellings:
        _ALIASES[alias] = family.name
    return family


def register_pattern_alias(pattern: str, family: str) -> None:
    """``pattern`` must have one group capturing the cutoff (``r"ndcg_cut_(\\d+)"``); a
    pattern registered twice is refused."""
    if any(known.pattern == pattern for known, _ in _PATTERN_ALIASES):
        raise ValueError(f"measure alias pattern {pattern!r} is already registered")
    _PATTERN_ALIASES.append((re.compile(pattern, re.IGNORECASE), family))


_GRAMMAR = re.compile(
    r"^\s*(?P<family>[A-Za-z][A-Za-z0-9_\-]*)"
    r"(?:\((?P<params>[^)]*)\))?"
    r"(?:@(?P<cutoff>\d+))?\s*$"
)


def _error(text: str, why: str) -> InputError:
    canonical = {f.lower() for f in FAMILIES}
    known = sorted(a for a in _ALIASES if a not in canonical)
    # Aliases are stored lower-cased, so compare lower-cased ("nDGC" -> "ndcg").
    name = text.split("@")[0].split("(")[0].strip().lower()
    guess = difflib.get_close_matches(name, list(_ALIASES), n=1)
    hint = f" Did you mean '{FAMILIES[_ALIASES[guess[0]]].name}'?" if guess else ""
    return InputError(
        message=f"unknown or malformed measure '{text}': {why}.{hint}",
        field="metric",
        fix="write measures like nDCG@10, R@100, RR@10, AP@100, P@10, overlap@10; known "
        f"families: {', '.join(sorted(FAMILIES))}"
        + (f" (aliases: {', '.join(known)})" if known else ""),
    )


def parse_measure(text: str) -> Measure:
    """Parse a measure string; raises :class:`InputError` with a did-you-mean."""
    if not isinstance(text, str):
        raise _error(str(text), "a measure is a string")
    for pattern, family in _PATTERN_ALIASES:
        hit = pattern.fullmatch(text.strip())
        if hit:
            return _build(text, family, None, int(hit.group(1)))
    match = _GRAMMAR.match(text)
    if not match:
        raise _error(text, "expected Family@cutoff")
    canonical = _ALIASES.get(match["family"].lower())
    if canonical is None:
        raise _error(text, f"no measure family '{match['family']}'")
    cutoff = int(match["cutoff"]) if match["cutoff"] else None
    return _build(text, canonical, match["params"], cutoff)


def _build(text: str, canonical: str, params_text: str | None, cutoff: int | None) -> Measure:
    family = FAMILIES[canonical]
    if family.needs_cutoff and cutoff is None:
        raise _error(text, f"{family.name} needs a cutoff, e.g. {family.name}@10")
    if cutoff is not None and cutoff < 1:
        raise _error(text, "the cutoff must be >= 1")
    if cutoff is not None and cutoff > MAX_CUTOFF:
        # A typo (10^9) would become an out-of-memory crash in the search or the scorer.
        raise _error(text, f"cutoff {cutoff} is larger than evalq allows ({MAX_CUTOFF}); "
                     "every query would keep that many documents")
    if not family.needs_cutoff and cutoff is not None:
        raise _error(text, f"{family.name} takes no cutoff")
    params = dict(family.defaults)
    if params_text:
        for item in params_text.split(","):
            key, _, value = item.partition("=")
            key = key.strip()
            if key not in params:
                raise _error(text, f"{family.name} has no parameter '{key}'")
            try:
                params[key] = float(value)
            except ValueError:
                raise _error(text, f"parameter '{key}' must be a number") from None
    return Measure(family=canonical, cutoff=cutoff, params=tuple(sorted(params.items())))


def parse_measures(texts: Iterable[str]) -> list[Measure]:
    seen: dict[Measure, None] = {}
    for t in texts:
        seen.setdefault(parse_measure(t), None)
    return list(seen)
