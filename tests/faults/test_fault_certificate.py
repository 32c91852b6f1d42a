"""Fault class "a certificate edited by hand, or a deployment that answers NaN" (issue 32):
`evalq verify` reads a file a user can edit and vectors a server returns. A certificate
whose probe or tolerance is not what `evalq certify` writes is exit 2 ("not an evalq
certificate", naming the part); before, a NaN tolerance or NaN vectors verified as MATCH
(no comparison with NaN is a mismatch) and unequal lists or text vectors ended in exit 3,
as did an identity, options or settings part of another type, token counts as text and a
vector value past float32."""

from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalq.app.cli import main
from evalq.app.verify_command import stored_plans
from evalq.core.errors import InputError
from evalq.execute.certify import CERT_VERSION, read_certificate
from evalq.execute.verify_causes import compare

VECTORS = (np.eye(4, 8, dtype=np.float64)).tolist()
CERT: dict[str, Any] = {
    "certificate_version": CERT_VERSION, "variant": "int8", "recipe": {"name": "r"},
    "identity": {}, "tolerance": {"max_one_minus_cosine": 1e-4},
    "probe": {"roles": ["query", "query", "document", "document"],
              "texts": ["a", "b", "c", "d"], "tokens": [3, 3, 3, 3], "vectors": VECTORS}}


def _probe(**part: Any) -> Any:
    return lambda cert: cert["probe"].update(part)


def _tolerance(value: Any) -> Any:
    return lambda cert: cert["tolerance"].update(max_one_minus_cosine=value)


EDITS = {
    "probe lists of unequal length": _probe(texts=["a", "b"]),
    "an empty probe": _probe(roles=[], texts=[], tokens=[], vectors=[]),
    "text in the vectors": _probe(vectors=[["x"] * 8] * 4),
    "NaN vectors": _probe(vectors=[[float("nan")] * 8] * 4),
    "vectors of another count": _probe(vectors=VECTORS[:2]),
    "a role that is neither": _probe(roles=["banana"] * 4),
    "NaN tolerance": _tolerance(float("nan")),
    "negative tolerance": _tolerance(-1),
    "tolerance past any cosine": _tolerance(5.0),
    "tolerance as text": _tolerance("1e-4"),
    "recipe not a mapping": lambda cert: cert.update(recipe=[1]),
    # what verify reads beside the probe: each ended in exit 3 (AttributeError,
    # OverflowError) instead of naming the certificate
    "identity a list": lambda cert: cert.update(identity=[1]),
    "identity.host a text": lambda cert: cert["identity"].update(host="x86-64/amx"),
    "identity.engines a list": lambda cert: cert["identity"].update(engines=["torch"]),
    "options a list": lambda cert: cert.update(options=[1]),
    "options.max_queries as text": lambda cert: cert.update(options={"max_queries": "40"}),
    "options.max_docs 0": lambda cert: cert.update(options={"max_docs": 0}),
    "settings a text": lambda cert: cert.update(settings="mean"),
    "token counts as text": _probe(tokens=["3"] * 4),
    "a vector value past float64": _probe(vectors=[[10**400, *row[1:]] for row in VECTORS]),
    "a vector value past float32": _probe(vectors=[[1e39, *row[1:]] for row in VECTORS]),
    "certificate_version true": lambda cert: cert.update(certificate_version=True),
}


def test_the_unedited_certificate_reads(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps(CERT))
    assert read_certificate(path)["variant"] == "int8"


@pytest.mark.parametrize("case", list(EDITS))
def test_an_edited_certificate_is_not_a_certificate(tmp_path: Path, case: str) -> None:
    cert = copy.deepcopy(CERT)
    EDITS[case](cert)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cert))
    with pytest.raises(InputError) as caught:
        read_certificate(path)
    assert "not an evalq certificate" in caught.value.message
    assert str(caught.value.file) == str(path)


@pytest.mark.parametrize("case", ["identity a list", "options a list"])
def test_an_edited_part_verify_reads_is_exit_2_not_3(
        tmp_path: Path, case: str, capsys: pytest.CaptureFixture[str]) -> None:
    """Through the command, with a recipe that plans: these edits passed the reading, and
    verify then failed on them with exit 3 ('a bug in evalq') once the plan was built."""
    from faultkit import recipe_data, run_cli

    cert = copy.deepcopy(CERT)
    cert.update(variant="int8-vectors", recipe=recipe_data(tmp_path),
                recipe_file=str(tmp_path / "recipe.yaml"))
    EDITS[case](cert)
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cert))
    outcome = run_cli(capsys, "verify", str(path))
    assert outcome.code == 2, outcome.err
    assert f"{path}: not an evalq certificate" in outcome.err, outcome.err


def test_an_invalid_stored_recipe_names_the_certificate(tmp_path: Path) -> None:
    with pytest.raises(InputError) as caught:
        stored_plans({"name": "r"}, tmp_path / "r.yaml", tmp_path / "c.json")
    assert str(caught.value.file) == str(tmp_path / "c.json")
    assert caught.value.field == "recipe"


def test_a_certificate_plans_where_its_results_folder_cannot_be_written(
        tmp_path: Path) -> None:
    """verify plans the stored recipe on the deployment host, and writes no results folder
    of it; the plan still checked the recipe's output there, so a certificate whose run
    wrote to ``results/<name>`` (the default) was refused from a working folder where
    that cannot be created, naming the certifying machine's recipe file."""
    from faultkit import recipe_data

    (tmp_path / "afile").write_text("")
    recipe = recipe_data(tmp_path, out=tmp_path / "afile" / "out")
    _, plan_for = stored_plans(recipe, tmp_path / "recipe.yaml", tmp_path / "c.json")
    assert plan_for("int8-vectors").variant("int8-vectors").model_path


def test_nan_vectors_from_a_deployment_do_not_match() -> None:
    """A server that answers NaN: every 1 - cosine is NaN, `NaN > tolerance` is false,
    and verify printed MATCH."""
    certified = np.asarray(VECTORS, dtype=np.float32)
    served = np.full_like(certified, np.nan)
    found = compare(served, certified, CERT["probe"]["roles"], [3] * 4,
                    {"normalize": False}, 1e-4)
    assert not found.matched
    assert any("NaN" in cause for cause in found.causes), found.causes


def test_huge_finite_vectors_from_a_deployment_are_measured_not_overflowed() -> None:
    """A server answering vectors of finite float32 values near 1e30 (a missing
    normalization of a model whose activations blow up): their squares overflow float32,
    and the cause said 'vector norms inf to inf', beside numpy's overflow warnings."""
    certified = np.asarray(VECTORS, dtype=np.float32)
    served = certified * np.float32(1e30)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        found = compare(served, certified, CERT["probe"]["roles"], [3] * 4,
                        {"normalize": True}, 1e-4)
    assert not found.matched and found.min_cosine == pytest.approx(1.0)
    assert found.causes == ("missing normalization: vector norms 1e+30 to 1e+30, the "
                            "certificate's are 1",), found.causes


@pytest.mark.parametrize("url", ["not a url", "ftp://127.0.0.1:8000/v1", "http://",
                                 "http://[::1", "http://127.0.0.1:abc/v1",
                                 "http://127.0.0.1:99999/v1", "http://127.0.0.1:0/v1"])
def test_verify_refuses_a_url_that_is_not_one(tmp_path: Path, url: str) -> None:
    """`--url 'not a url'` built the model, then retried four times before failing with
    'cannot reach not a url/v1/embeddings'; it is refused before anything loads. An
    unclosed IPv6 bracket (urlsplit's ValueError) and a port that is not a number
    (httpx's InvalidURL, once the model was built) ended in exit 3, and port 99999 was
    sent and refused as 'cannot reach'."""
    from evalq.app.verify_command import verify_command

    path = tmp_path / "c.json"
    path.write_text(json.dumps(CERT))
    with pytest.raises(InputError) as caught:
        verify_command(path, url=url)
    assert caught.value.field == "--url" and "http(s)" in caught.value.message


@pytest.mark.parametrize("count", ["0", "1"])
def test_a_probe_without_a_query_and_a_document_is_refused(
        count: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--probe 1`` wrote a certificate with no query text (half of one rounds to none),
    and ``--probe 0`` pointed at a recipe value that does not exist."""
    with pytest.raises(SystemExit) as exit_:
        main(["certify", "no-such-folder", "--probe", count])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--probe" in err and "at least 2" in err and "recipe" not in err


@pytest.mark.parametrize("lists_route", [True, False])
def test_a_served_model_of_another_name_names_verify_flags(
        tmp_path: Path, lists_route: bool, capsys: pytest.CaptureFixture[str]) -> None:
    """A server started with --served-model-name answers 404 to verify without --model
    (it asks for the certified model's path). The client's error named the recipe's
    fields, 'set http.model' (or, where the server lists no routes, 'set http.route'),
    which verify has no recipe to set; it names --model and --url."""
    from faultkit import CannedServer, recipe_data, run_cli

    cert = copy.deepcopy(CERT)
    cert.update(variant="int8-vectors", recipe=recipe_data(tmp_path),
                recipe_file=str(tmp_path / "recipe.yaml"))
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cert))
    listing: dict[str, Any] = {"data": [{"id": "minilm", "owned_by": "vllm"}]}
    if lists_route:  # what /openapi.json says (the stand-in answers every GET alike)
        listing["paths"] = {"/v1/embeddings": {"post": {}}}

    def reply(inputs: Any, headers: Any) -> Any:
        return 404, '{"error": "The model does not exist."}', {}

    with CannedServer(reply, listing) as server:
        outcome = run_cli(capsys, "verify", str(path), "--url", f"{server.url}/v1")
    assert outcome.code == 2, outcome.err
    assert f"field '{'--model' if lists_route else '--url'}'" in outcome.err, outcome.err
    assert "--model with the name" in outcome.err and "--served-model-name" in outcome.err
    assert "http." not in outcome.err, outcome.err


@pytest.mark.parametrize("count", ["1001", str(10**20)])
def test_a_probe_past_its_bound_is_refused(
        count: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--probe 10**20`` certified: it took every query and every distinct document of
    the run's first dataset, each encoded once more alone, without a word."""
    with pytest.raises(SystemExit) as exit_:
        main(["certify", "no-such-folder", "--probe", count])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--probe" in err and "at most 1000" in err


def test_a_certificate_for_a_variant_its_recipe_lacks_names_the_certificate(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`variant` edited to a name the stored recipe does not have pointed the user at
    `--only` (which verify does not take) and at the recipe file it was certified from,
    which may no longer exist: the certificate's own two parts disagree."""
    from faultkit import recipe_data, run_cli

    cert = copy.deepcopy(CERT)
    cert.update(variant="nosuch", recipe=recipe_data(tmp_path),
                recipe_file=str(tmp_path / "recipe.yaml"))
    path = tmp_path / "c.json"
    path.write_text(json.dumps(cert))
    outcome = run_cli(capsys, "verify", str(path))
    assert outcome.code == 2, outcome.err
    assert f"{path}: field 'variant'" in outcome.err, outcome.err
    assert "'nosuch'" in outcome.err and "fp32, int8-vectors" in outcome.err
    assert "--only" not in outcome.err and "certify that results folder again" in outcome.err
