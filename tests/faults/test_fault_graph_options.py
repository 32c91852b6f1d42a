"""Fault class "graph backend options checked too late": each case passed ``evalq
validate`` and then ended in exit 3, a crash, or a silently different run.

``onnx: {file: '~nosuchuser/x.onnx'}`` was exit 3 (pathlib cannot expand an unknown user's
home); ``file: ''`` was ignored (evalq exported the checkpoint itself and judged that);
a missing file or a folder was found only after the models loaded; ``threads: 1000000``
ended in a segfault; ``parity.min_cosine: .nan`` failed every check. Each is now exit 2
when the recipe is read, naming the file, the field and the fix. User graph paths are
resolved against the recipe's folder, like every other path in a recipe.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest
from faultkit import no_traceback, recipe_data, run_cli

from evalq.recipe.schema import load_recipe
from support import recipes


def _with_candidate(tmp_path: Path, candidate: dict[str, Any]) -> dict[str, Any]:
    return recipe_data(tmp_path, candidates=[{"name": "g", **candidate}], gates=[])


def _graph_cases(tmp_path: Path) -> dict[str, tuple[dict[str, Any], str, str]]:
    folder = tmp_path / "a-folder.onnx"
    folder.mkdir()
    xml = tmp_path / "ir" / "openvino_model.xml"
    xml.parent.mkdir()
    xml.write_text("<net/>")  # no .bin beside it
    return {
        "empty file": ({"backend": "onnx", "onnx": {"file": ""}}, "onnx.file",
                       "empty"),
        "blank file": ({"backend": "onnx", "onnx": {"file": "  "}}, "onnx.file", "empty"),
        "nul in file": ({"backend": "onnx", "onnx": {"file": "a\0b.onnx"}}, "onnx.file",
                        "NUL"),
        "unknown user": ({"backend": "onnx", "onnx": {"file": "~nosuchuser-evalq/x.onnx"}},
                         "onnx.file", "home folder"),
        "missing file": ({"backend": "onnx", "onnx": {"file": "no/such.onnx"}},
                         "onnx.file", "does not exist"),
        "a folder": ({"backend": "onnx", "onnx": {"file": str(folder)}}, "onnx.file",
                     "is a folder"),
        "openvino missing": ({"backend": "openvino", "openvino": {"file": "x.xml"}},
                             "openvino.file", "does not exist"),
        "openvino without bin": ({"backend": "openvino", "openvino": {"file": str(xml)}},
                                 "openvino.file", "openvino_model.bin"),
        "onnx threads huge": ({"backend": "onnx", "onnx": {"threads": 1_000_000}},
                              "onnx.threads", "1024"),
        "openvino threads huge": ({"backend": "openvino", "openvino": {"threads": 10**9}},
                                  "openvino.threads", "1024"),
    }


CASES = ["empty file", "blank file", "nul in file", "unknown user", "missing file",
         "a folder", "openvino missing", "openvino without bin", "onnx threads huge",
         "openvino threads huge"]


@pytest.mark.parametrize("case", CASES)
def test_a_graph_option_is_refused_when_the_recipe_is_read(tmp_path, capsys, case) -> None:
    candidate, field, words = _graph_cases(tmp_path)[case]
    recipe = recipes.write(tmp_path / "recipe.yaml", _with_candidate(tmp_path, candidate))
    outcome = run_cli(capsys, "validate", str(recipe))
    assert outcome.code == 2, outcome.err
    assert no_traceback(outcome.err)
    assert f"candidates.0.{field}" in outcome.err and words in outcome.err
    assert str(recipe) in outcome.err


def test_a_pipeline_rerankers_graph_file_is_checked_too(tmp_path, capsys) -> None:
    data = recipe_data(tmp_path, candidates=[], gates=[])
    data["pipelines"] = [{"name": "p", "first_stage": {"kind": "bm25"}, "depths": [5],
                          "cutoff": 5, "metrics": ["nDCG@5"],
                          "reranker": {"model": "fixture:minilm-cross-encoder", "candidates": [
                              {"name": "g", "backend": "onnx",
                               "onnx": {"file": "~nosuchuser-evalq/ce.onnx"}}]}}]
    recipe = recipes.write(tmp_path / "recipe.yaml", data)
    outcome = run_cli(capsys, "validate", str(recipe))
    assert outcome.code == 2 and no_traceback(outcome.err), outcome.err
    assert "pipelines.0.reranker.candidates.0.onnx.file" in outcome.err


@pytest.mark.parametrize("value", [math.nan, math.inf, 1.5, -2.0])
def test_parity_min_cosine_must_be_a_cosine(tmp_path, capsys, value) -> None:
    data = recipe_data(tmp_path)
    data["parity"] = {"enabled": True, "min_cosine": value}
    recipe = recipes.write(tmp_path / "recipe.yaml", data)
    outcome = run_cli(capsys, "validate", str(recipe))
    assert outcome.code == 2 and no_traceback(outcome.err), outcome.err
    assert "parity.min_cosine" in outcome.err


def test_graph_paths_are_relative_to_the_recipes_folder(tmp_path, capsys,
                                                        monkeypatch) -> None:
    """Run from another folder, ``file: graphs/model.onnx`` names the file beside the
    recipe, as a dataset path would (it was looked up in the working folder)."""
    home = tmp_path / "project"
    (home / "graphs").mkdir(parents=True)
    graph = home / "graphs" / "model.onnx"
    graph.write_bytes(b"not parsed when the recipe is read")
    recipe = recipes.write(home / "recipe.yaml", _with_candidate(
        home, {"backend": "onnx", "onnx": {"file": "graphs/model.onnx", "threads": 2}}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    outcome = run_cli(capsys, "validate", str(recipe))
    assert outcome.code == 0, outcome.err
    loaded = load_recipe(recipe)
    assert loaded.candidates[0].onnx is not None
    assert Path(loaded.candidates[0].onnx.file) == graph
    assert os.getcwd() == str(elsewhere)


# ---- a user's graph that runs but emits what no model would: built with torch ----------

def _user_graph(folder: Path, case: str) -> Path:
    import torch

    class Odd(torch.nn.Module):
        """384-wide token states (MiniLM's width) that are NaN, inf, zero or integers."""

        def forward(self, input_ids, attention_mask):
            ones = (input_ids * 0 + 1).unsqueeze(-1).expand(-1, -1, 384)
            if case == "int64":
                return ones * attention_mask.unsqueeze(-1)
            states = ones.to(torch.float32)
            fill = {"nan": float("nan"), "inf": float("inf"), "zeros": 0.0}[case]
            return states * fill

    path = folder / f"{case}.onnx"
    ids = torch.ones((2, 5), dtype=torch.int64)
    torch.onnx.export(Odd().eval(), (ids, ids), str(path),
                      input_names=["input_ids", "attention_mask"],
                      output_names=["last_hidden_state"], dynamo=False,
                      dynamic_axes={"input_ids": {0: "b", 1: "s"},
                                    "attention_mask": {0: "b", 1: "s"}})
    return path


@pytest.mark.model
@pytest.mark.parametrize(("case", "words"), [("nan", "NaN"), ("inf", "Inf"),
                                             ("zeros", "all-zero"), ("int64", "int64")])
def test_a_user_graphs_unusable_output_names_the_graph(
        minilm_path, minilm_settings, tmp_path, case, words) -> None:
    """NaN / inf / zero vectors blamed the checkpoint folder (field 'backend'); an int64
    output was cast silently and measured as garbage. The graph file is named now."""
    from evalq.core.errors import InputError
    from evalq.engines.context import BuildContext
    from evalq.engines.onnx_backend import OnnxOptions, build
    from evalq.recipe.schema import Variant

    graph = _user_graph(tmp_path, case)
    ctx = BuildContext(minilm_path, minilm_settings, tmp_path / "logs", "cpu", tmp_path)
    with pytest.raises(InputError) as info:
        encoder = build(Variant(name="u", backend="onnx",
                                onnx=OnnxOptions(file=str(graph))), ctx)
        try:
            encoder.embed(["a text", "another text"])
        finally:
            encoder.close()
    assert info.value.field == "onnx.file" and str(graph) in info.value.message
    assert words in info.value.message and info.value.fix
