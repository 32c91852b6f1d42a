"""The check both static int8 graph backends share (tests/engines/test_onnx_backend.py,
test_openvino_backend.py): a certificate's digest of the calibration draw finds the
cached graph without reading the corpus, and any other draw reads it."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest


def _unread(n: int, seed: int) -> list[tuple[str, str]]:
    raise AssertionError("the corpus was read")


def assert_certified_draw_needs_no_corpus(build: Callable[[Any, Any], Any], variant: Any,
                                          ctx: Any, count: int) -> None:
    """``build(variant, ctx)`` once as a run does, then with the corpus closed: the
    certified ``(count, 0)`` digest finds the same graph; another digest, count or seed,
    or none, draws (and so reads the closed corpus)."""
    first = build(variant, ctx)
    first.close()
    drawn = first.describe()["graph_info"]["params"]["calibration_ids"]
    known = dataclasses.replace(ctx, calibration=_unread, known_draws={(count, 0): drawn})
    again = build(variant, known)
    again.close()
    assert again.describe()["graph_key"] == first.describe()["graph_key"]
    for other in ({(count, 0): "0" * 16}, {(2 * count, 0): drawn}, {(count, 1): drawn}, {}):
        with pytest.raises(AssertionError, match="the corpus was read"):
            build(variant, dataclasses.replace(known, known_draws=other))
