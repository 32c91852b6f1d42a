"""What a quantization method that derives a graph (ONNX, OpenVINO IR) is given.

Methods in ``quantize.METHODS`` that apply to the in-process backend change a torch
model (``load``). The ONNX and OpenVINO methods instead turn a graph file into another
(``derive``); static ones calibrate on corpus texts the run supplies through
``BuildContext.calibration`` and never on the judged queries, so a verdict is not tuned
to its own test. This module holds the context they get and the checks they share.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Protocol

from pydantic import Field
from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

from evalq.core.errors import InputError
from evalq.engines.quantize.onnx_graph import OnnxGraph, cached_derived

# (n, seed) -> up to n (doc id, text) pairs drawn from the run's corpora, seeded.
CalibrationSource = Callable[[int, int], list[tuple[str, str]]]

# How many corpus texts a static method calibrates on, and the seed that draws them.
# Strict: YAML's ``true`` is not 1 text, and the draw's generator takes seeds in
# [0, 2**32) only (``seed: -1`` passed validate and ended the run in exit 3).
CalibrationCount = Annotated[int, Field(ge=1, le=100_000, strict=True)]
Seed = Annotated[int, Field(ge=0, le=2**32 - 1, strict=True)]


def option_refusal(message: str, fix: str) -> PydanticCustomError:
    """A method parameter refused with its own ``fix`` (``validate_quantization`` reads
    the fix from the error's context), raised from that parameter's field validator."""
    return PydanticCustomError("quantization_option", "{message}",
                               {"message": message, "fix": fix})


def option_error(name: str, value: Any, message: str, fix: str) -> ValidationError:
    """:func:`option_refusal` of parameter ``name``, for the checks of a model validator
    that needs several parameters at once (the error names ``name`` as the field)."""
    return ValidationError.from_exception_data(
        "quantization", [InitErrorDetails(type=option_refusal(message, fix), loc=(name,),
                                          input=value)])


class CalibrationFront(Protocol):
    """The text side a static method calibrates through: ``textfront.TokenizerFront``
    (documents, with the document prefix) or ``pairfront.PairFront`` (a reranker's
    (query, document) pairs made of corpus texts). ``calibration_source`` says in words
    what the samples are, for the record."""

    calibration_source: str

    def calibration_samples(self, drawn: list[tuple[str, str]]
                            ) -> tuple[list[str], list[Any]]:
        """Drawn ``(doc id, text)`` pairs -> (sample ids, samples :meth:`batch` takes)."""
        ...

    def batch(self, samples: Sequence[Any], tensors: str = "pt") -> Any:
        ...


@dataclass(frozen=True)
class DeriveContext:
    """Where derived graphs are cached, the text side (``textfront`` or ``pairfront``),
    and where calibration texts come from (None: this run has no corpus to offer).
    ``known_draws``: ``(count, seed)`` -> the digest of the documents a certified graph
    was calibrated on, as its certificate records it (``evalq verify``)."""

    cache_dir: Path
    front: CalibrationFront
    calibration: CalibrationSource | None
    model_path: Path
    known_draws: Mapping[tuple[int, int], str] = field(default_factory=dict)


def draw_digest(ids: Sequence[str]) -> str:
    """A calibration draw's part of its graph's cache key: its documents' ids, in order."""
    return hashlib.sha256("\0".join(ids).encode()).hexdigest()[:16]


def certified_graph(ctx: DeriveContext, parent: OnnxGraph, method: str, count: int,
                    seed: int, key_params: Callable[[str], dict[str, Any]], file: str,
                    ) -> OnnxGraph | None:
    """The cached graph a certificate's draw keys, found without reading the corpus.

    The key of a calibrated graph holds the digest of its draw, and drawing means loading
    every dataset (the longest step of a warm ``evalq verify``). A certificate records
    that digest, so verify looks the graph up by it; where it is not cached (another
    machine, another parent export) the method draws and builds as a run does, and the
    digest of what it draws keys the result."""
    drawn = ctx.known_draws.get((count, seed))
    if drawn is None:
        return None
    return cached_derived(parent, ctx.cache_dir, method, key_params(drawn), file=file)


def hidden_size(model_path: Path) -> int:
    """The checkpoint's hidden size (what every token state and vector is wide)."""
    config = Path(model_path) / "config.json"
    try:
        return int(json.loads(config.read_text())["hidden_size"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(message=f"cannot read hidden_size from {config}: {exc}", file=config,
                         field="hidden_size",
                         fix="point the recipe at a transformers checkpoint folder") from None


def calibration_texts(ctx: DeriveContext, count: int, seed: int, method: str,
                      ) -> tuple[list[str], list[Any]]:
    """``count`` samples made of corpus documents (their ids, and what the front batches:
    texts with the document prefix, or a reranker's pairs) to calibrate on."""
    if ctx.calibration is None:
        raise InputError(message=f"quantization method '{method}' calibrates on corpus "
                         "texts, and this command has no corpus to draw them from",
                         field="quantization.method",
                         fix="run it through evalq run / evalq parity with a dataset, or "
                         "choose a method without calibration (ort-dynamic-int8)")
    pairs = ctx.calibration(count, seed)
    if not pairs:
        raise InputError(message=f"quantization method '{method}' calibrates on corpus "
                         "texts, but the recipe's corpora are empty", field="datasets",
                         fix="give the recipe a dataset with documents (max_docs > 0), or "
                         "use ort-dynamic-int8, which needs no calibration")
    return ctx.front.calibration_samples(pairs)


__all__ = ["CalibrationCount", "CalibrationFront", "CalibrationSource", "DeriveContext", "Seed",
           "calibration_texts", "certified_graph", "draw_digest", "graph_method_load",
           "hidden_size", "option_error", "option_refusal"]


def graph_method_load(name: str, backends: tuple[str, ...]) -> Callable[..., Any]:
    """The registry's in-process hook for a graph method: refused, naming its backends."""
    def load(model_path: Path, params: Any, device: str, dtype: str | None = None) -> Any:
        raise InputError(message=f"quantization method '{name}' derives a graph that "
                         f"backend {' or '.join(backends)} runs; the in-process backend "
                         "cannot run it", field="backend",
                         fix=f"use backend: {backends[0]} for this variant")
    return load
