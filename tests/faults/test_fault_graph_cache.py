"""Fault class "the graph cache trusts its folder name": evalq's cached graphs
(``<cache_dir>/checkpoints/graph-*``, ``onnx-export-*``) carried no checksum, so 50 weight
bytes changed in a cached int8 ``model.onnx`` were read silently, flipped bits in an NNCF
``.bin`` moved nDCG@10, an IR without its ``.bin`` counted as complete, and a damaged
``evalq-onnx.json`` was exit 3 or blamed on a recipe field. The record now keeps a checksum
of every file the build wrote; a reuse verifies them and rebuilds a damaged folder with one
warning naming it, as the embedding cache does with its chunks.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from evalq.engines.quantize.onnx_graph import GRAPH_FILE, RECORD_FILE, cached_graph

WEIGHTS = bytes(range(256)) * 64


class _Builds:
    """A graph build that writes a graph and a weights file, counting its runs."""

    def __init__(self) -> None:
        self.runs = 0

    def __call__(self, work: Path) -> dict:
        self.runs += 1
        (work / GRAPH_FILE).write_bytes(b"graph" + WEIGHTS)
        (work / "model.bin").write_bytes(WEIGHTS)
        return {"bits": 8, "exporter": "test"}


def _damage_graph(folder: Path) -> None:
    data = bytearray((folder / GRAPH_FILE).read_bytes())
    data[100:150] = bytes(50)  # 50 weight bytes, the size unchanged
    (folder / GRAPH_FILE).write_bytes(bytes(data))


DAMAGE = {
    "weight bytes changed": (_damage_graph, "does not match its checksum"),
    "truncated graph": (lambda f: (f / GRAPH_FILE).write_bytes(b"graph"),
                        "does not match its checksum"),
    "weights file gone": (lambda f: (f / "model.bin").unlink(), "model.bin is missing"),
    "record not JSON": (lambda f: (f / RECORD_FILE).write_text("{not json"), "unreadable"),
    "record a list": (lambda f: (f / RECORD_FILE).write_text("[1, 2]"), "no checksums"),
    "record without checksums": (
        lambda f: (f / RECORD_FILE).write_text(json.dumps({"bits": 8})), "no checksums"),
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_a_damaged_cached_graph_is_rebuilt_with_a_warning(tmp_path, case) -> None:
    folder = tmp_path / "checkpoints" / "graph-ort-dynamic-int8-0123456789abcdef"
    builds = _Builds()
    first = cached_graph(folder, builds)
    assert builds.runs == 1 and not first.reused and "files" not in first.info
    again = cached_graph(folder, builds)
    assert builds.runs == 1 and again.reused and again.info == first.info
    damage, words = DAMAGE[case]
    damage(folder)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rebuilt = cached_graph(folder, builds)
    assert builds.runs == 2 and not rebuilt.reused
    assert (folder / GRAPH_FILE).read_bytes() == b"graph" + WEIGHTS
    assert (folder / "model.bin").read_bytes() == WEIGHTS
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and str(folder) in messages[0] and words in messages[0]
    assert cached_graph(folder, builds).reused and builds.runs == 2
