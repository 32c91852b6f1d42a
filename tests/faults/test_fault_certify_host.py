"""Fault class "a results folder certified on another machine" (`evalq certify`): a
certificate's probe vectors are encoded by the machine that runs `certify`, and its
identity names that machine's numerics class. A folder whose verdicts were decided on
another class (copied from another CPU, or certified under an ISA cap the run did not
have) wrote a certificate of a class no gate decided, and `evalq verify` on that class
then printed MATCH without a note. It is exit 2 naming the summary's class and this
machine's, and nothing is written. And a model folder whose tokenizer was edited after
certifying: verify names the folder's non-weight files, which the certificate's digest
tells apart."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from faultkit import no_traceback, run_cli, write_recipe

from evalq.app.cli import main
from evalq.core.host import current_class
from evalq.engines.modelinfo import resolve_model_path

pytestmark = [pytest.mark.slow, pytest.mark.model]


@pytest.fixture(scope="module")
def passed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run of the fault recipe whose int8-vectors candidate passed (4 queries
    leave it inconclusive, so the summary says pass, as tests/execute/test_certify.py's
    copies do)."""
    folder = tmp_path_factory.mktemp("certify-host")
    assert main(["run", str(write_recipe(folder))]) in (0, 1)
    out = folder / "out"
    summary = json.loads((out / "summary.json").read_text())
    summary["variants"]["int8-vectors"].update(verdict="pass", passed=True)
    (out / "summary.json").write_text(json.dumps(summary))
    return out


def _decided_on(passed: Path, tmp_path: Path, numerics_class: str) -> Path:
    out = tmp_path / "out"
    shutil.copytree(passed, out)
    summary = json.loads((out / "summary.json").read_text())
    summary["host"]["numerics_class"] = numerics_class
    (out / "summary.json").write_text(json.dumps(summary))
    return out


def test_a_folder_decided_on_another_class_is_not_certified_here(
        passed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    elsewhere = "arm64/sve" if current_class().startswith("x86-64") else "x86-64/avx2"
    out = _decided_on(passed, tmp_path, elsewhere)
    outcome = run_cli(capsys, "certify", str(out), "--probe", "2")
    assert outcome.code == 2, outcome.err
    assert no_traceback(outcome.err)
    assert f"{out / 'summary.json'}: field 'host.numerics_class'" in outcome.err
    assert f"decided on numerics class {elsewhere}" in outcome.err
    assert f"this machine is of class {current_class()}" in outcome.err
    assert not (out / "certificates").exists()


def test_a_folder_decided_on_this_class_is_certified(
        passed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _decided_on(passed, tmp_path, current_class())
    outcome = run_cli(capsys, "certify", str(out), "--probe", "2")
    assert outcome.code == 0, outcome.err
    cert = json.loads((out / "certificates" / "int8-vectors.json").read_text())
    assert cert["identity"]["host"]["numerics_class"] == current_class()


def test_an_edited_tokenizer_is_named_as_the_cause(
        passed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The model folder's tokenizer edited after certifying (lower-casing off): every
    vector moved and verify named 'another pooling, dtype, numerics class or model',
    though the certificate's digest of the folder's non-weight files told it."""
    out = _decided_on(passed, tmp_path, current_class())
    assert run_cli(capsys, "certify", str(out), "--probe", "4").code == 0
    path = out / "certificates" / "int8-vectors.json"
    cert = json.loads(path.read_text())
    model = tmp_path / "model"
    shutil.copytree(resolve_model_path(cert["recipe"]["model"]["path"]), model)
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config,
                                                             "do_lower_case": False}))
    cert["recipe"]["model"]["path"] = str(model)
    path.write_text(json.dumps(cert))
    outcome = run_cli(capsys, "verify", str(path))
    assert outcome.code == 1, outcome.err
    assert f"cause: other non-weight files (tokenizer, configuration) in {model}" \
        in outcome.out, outcome.out
    assert "a different model" not in outcome.out  # the weights and config.json are the same


def test_a_certificate_names_its_recipe_and_results_absolutely(
        passed: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A run started as `evalq run recipe.yaml` with `path: beir-tiny` stores both
    relative; its certificate kept them so, and a verify from another working folder
    resolved the dataset there: exit 2 'BEIR dataset folder not found' for a candidate
    whose graph is calibrated on the corpus."""
    out = _decided_on(passed, tmp_path, current_class())
    manifest = json.loads((out / "manifest.json").read_text())
    dataset = manifest["recipe"]["datasets"][0]
    dataset["path"] = os.path.relpath(dataset["path"], passed.parent)
    manifest["recipe_file"] = "recipe.yaml"
    (out / "manifest.json").write_text(json.dumps(manifest))
    monkeypatch.chdir(passed.parent)  # where the run was started
    assert run_cli(capsys, "certify", str(out), "--probe", "2").code == 0
    cert = json.loads((out / "certificates" / "int8-vectors.json").read_text())
    assert cert["recipe_file"] == str(passed.parent / "recipe.yaml")
    assert cert["verdict"]["results"] == str(out)


def test_a_probe_larger_than_the_dataset_says_so(
        passed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--probe 64`` on a dataset of 4 queries and 8 documents wrote a certificate of 12
    texts, not 32 of each, and said nothing."""
    out = _decided_on(passed, tmp_path, current_class())
    outcome = run_cli(capsys, "certify", str(out), "--probe", "64")
    assert outcome.code == 0, outcome.err
    assert ("note: int8-vectors: the probe holds 4 queries and 8 documents, fewer than "
            "the 32 of each --probe 64 asks") in outcome.out, outcome.out


DAMAGED_MANIFESTS = {
    "no recipe": lambda manifest: manifest.pop("recipe"),
    "a recipe without the candidate": lambda manifest: manifest["recipe"].update(
        candidates=[]),
}


@pytest.mark.parametrize("case", list(DAMAGED_MANIFESTS))
def test_certify_of_a_damaged_manifest_names_it(
        passed: Path, tmp_path: Path, case: str,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Both ended in exit 3 (KeyError 'recipe', KeyError 'int8-vectors'): the manifest's
    typed check lets a missing recipe through, and certify looked the summary's passed
    candidate up in the stored recipe unchecked."""
    out = _decided_on(passed, tmp_path, current_class())
    manifest = json.loads((out / "manifest.json").read_text())
    DAMAGED_MANIFESTS[case](manifest)
    (out / "manifest.json").write_text(json.dumps(manifest))
    outcome = run_cli(capsys, "certify", str(out), "--probe", "2")
    assert outcome.code == 2, outcome.err
    assert f"{out / 'manifest.json'}: field 'recipe'" in outcome.err, outcome.err
    assert not (out / "certificates").exists()
