"""Certificates and ``evalq verify`` against this machine's engine, on the session's
shared report run (real MiniLM): the certified candidate's probe set re-encodes within
its own tolerance (exit 0); a certificate whose vectors or identity differ is a mismatch
naming the cause (exit 1); a file that is no certificate is bad input (exit 2)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evalq.app.cli import main
from evalq.app.verify_command import stored_plans
from evalq.core.host import current_class
from evalq.execute.certify import certify, read_certificate, verify

pytestmark = [pytest.mark.slow, pytest.mark.model]


@pytest.fixture(scope="module")
def certified(report_runs, tmp_path_factory) -> Path:
    """The small run as if torch dynamic int8 had passed (40 queries cannot certify a
    1% margin, so the real run leaves it inconclusive)."""
    root = tmp_path_factory.mktemp("certified") / "small"
    shutil.copytree(report_runs.small, root)
    summary = json.loads((root / "summary.json").read_text())
    summary["variants"]["dyn-int8"].update(verdict="pass", passed=True)
    (root / "summary.json").write_text(json.dumps(summary))
    return root


@pytest.fixture(scope="module")
def certificate(certified: Path) -> Path:
    manifest = json.loads((certified / "manifest.json").read_text())
    variants, plan_for = stored_plans(manifest["recipe"], Path(manifest["recipe_file"]))
    written, _ = certify(certified, variants, plan_for, probe=16)
    assert [p.name for p in written] == ["dyn-int8.json"]  # only what passed
    return written[0]


def test_a_certificate_holds_identity_probe_and_tolerance(certificate: Path) -> None:
    cert = json.loads(certificate.read_text())
    assert cert["variant"] == "dyn-int8" and cert["verdict"]["verdict"] == "pass"
    assert cert["identity"]["backend"]["quantization"]["method"] == "torch-dynamic-int8"
    assert cert["identity"]["host"]["numerics_class"] == current_class()
    assert cert["verdict"]["numerics_class"] == current_class()
    assert cert["identity"]["model_fingerprint"]
    assert cert["probe"]["roles"].count("query") == cert["probe"]["roles"].count("document")
    assert len(cert["probe"]["vectors"]) == len(cert["probe"]["texts"]) == 16
    assert 0 < cert["tolerance"]["max_one_minus_cosine"] < 1e-2


def test_verify_on_the_same_machine_matches(certificate: Path, capsys) -> None:
    assert main(["verify", str(certificate)]) == 0
    assert "MATCH" in capsys.readouterr().out


def test_other_vectors_and_another_class_are_a_mismatch_naming_it(
        certificate: Path, tmp_path: Path, capsys) -> None:
    cert = json.loads(certificate.read_text())
    vectors = cert["probe"]["vectors"]
    cert["probe"]["vectors"] = vectors[1:] + vectors[:1]  # each text gets another's vector
    cert["identity"]["host"]["numerics_class"] = "x86-64/another-class"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(cert))
    stored = read_certificate(other)
    _, plan_for = stored_plans(stored["recipe"], Path(stored["recipe_file"]))
    found = verify(stored, plan_for(stored["variant"]))
    assert not found.matched and found.min_cosine < 0.99
    assert any("another numerics class" in c for c in found.causes)
    assert main(["verify", str(other)]) == 1
    assert "cause: another numerics class" in capsys.readouterr().out


def test_a_file_that_is_no_certificate_is_bad_input(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"certificate_version": 1}))
    assert main(["verify", str(bad)]) == 2
    assert "not an evalq certificate" in capsys.readouterr().err


# -- against a served endpoint: an in-process stand-in serving the real MiniLM in fp32,
# with one deployment fault at a time ---------------------------------------------------

@pytest.fixture(scope="module")
def fp32_certificate(report_runs, tmp_path_factory) -> Path:
    """int8-vectors' certificate (its encoder is MiniLM in fp32, what the stand-in
    serves), from a copy of the small run where it passed."""
    root = tmp_path_factory.mktemp("certified-fp32") / "small"
    shutil.copytree(report_runs.small, root)
    summary = json.loads((root / "summary.json").read_text())
    summary["variants"]["int8-vectors"].update(verdict="pass", passed=True)
    (root / "summary.json").write_text(json.dumps(summary))
    assert main(["certify", str(root), "--probe", "16"]) == 0  # the command, once
    written = sorted((root / "certificates").glob("*.json"))
    assert [p.name for p in written] == ["int8-vectors.json"]
    return written[0]


@pytest.fixture(scope="module")
def st_model(minilm_path: Path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_path), device="cpu")


@pytest.mark.parametrize(("fault", "exit_code", "cause"), [
    ({}, 0, None),
    ({"serve_unnormalized": True}, 1, "missing normalization"),
    ({"serve_max_tokens": 128}, 1, "another truncation length"),
])
def test_an_endpoint_is_verified_and_its_fault_named(fp32_certificate: Path, st_model,
                                                     capsys, fault, exit_code,
                                                     cause) -> None:
    from support.fake_embedding_server import FakeState, fake_server

    cert = json.loads(fp32_certificate.read_text())
    assert max(cert["probe"]["tokens"]) > 128, "the probe keeps long documents"
    with fake_server(FakeState(st_model, **fault)) as server:
        code = main(["verify", str(fp32_certificate), "--url", f"{server.url}/v1"])
    out = capsys.readouterr().out
    assert code == exit_code, out
    if cause is None:
        assert "MATCH" in out and "cause" not in out
    else:
        causes = [line for line in out.splitlines() if line.strip().startswith("cause:")]
        assert len(causes) == 1 and cause in causes[0], out
