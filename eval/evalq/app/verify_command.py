"""``evalq certify RESULTS`` and ``evalq verify CERTIFICATE``: what they print and return
(the work is ``evalq.execute.certify``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from evalq.core.errors import InputError
from evalq.execute.certify import PlanFor, certify, read_certificate, verify
from evalq.plan.types import Plan
from evalq.plan.variant import SearchedVariant
from evalq.recipe.plan import build_plan
from evalq.recipe.schema import Recipe
from evalq.results.folder import RunFolder


def stored_plans(stored: Any, recipe_file: Path, source: Path | None = None
                 ) -> tuple[dict[str, SearchedVariant], PlanFor]:
    """The variants of a recipe a results folder or a certificate (``source``) stores,
    and a planner for one of them at a time (without the cache), which certify and
    verify take."""
    try:
        recipe = Recipe.model_validate(stored)
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or "recipe"
        raise InputError(message=f"the recipe stored here is invalid: {field}: "
                         f"{first['msg']}", file=source, field="recipe",
                         fix="pass a file evalq wrote, unedited (certify the results "
                         "folder again)") from None

    def plan_for(name: str) -> Plan:
        return build_plan(recipe, recipe_file, use_cache=False, only=[name],
                          writes_results=False)

    return {v.name: v for v in recipe.variants}, plan_for


def certify_command(results: Path, *, probe: int = 32) -> int:
    manifest = RunFolder(results).read_manifest_data()
    variants, plan_for = stored_plans(manifest.get("recipe"),  # absent: exit 2, named
                                      Path(str(manifest.get("recipe_file") or "")),
                                      results / "manifest.json")
    written, notes = certify(results, variants, plan_for, probe=probe)
    for note in notes:
        print(f"note: {note}")
    for path in written:
        print(f"certificate written to {path}")
    if not written:
        print("no certificate: no candidate passed every gate with an in-process engine")
    return 0


def _check_url(url: str) -> None:
    """``--url`` checked before anything loads: 'not a url' was retried 4 times, and an
    unclosed IPv6 bracket or a port that is not a number (which ``urlsplit`` raises on, or
    httpx once the model was built) ended in exit 3; a port past 65535 was sent and
    refused as 'cannot reach'."""
    try:
        parts = urlsplit(url)
        why = " (port 0)" if parts.port == 0 else ""
    except ValueError as exc:  # urlsplit's own refusal: "Invalid IPv6 URL", "Port out of range"
        parts, why = None, f" ({exc})"
    if why or parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(message=f"{url!r} is not an http(s) URL{why}", field="--url",
                         fix="pass the endpoint's base, e.g. --url http://127.0.0.1:8000/v1")


# What the HTTP client names of a recipe's served variant, as verify's flags: the endpoint
# is --url and the model --model, and a user told to 'set http.model' has no recipe to set
# it in (a vLLM started with --served-model-name answered 404 to verify without --model).
_SERVED_FIELDS = {"http.model": "--model", "http.route": "--url", "url": "--url"}


def _in_verify_flags(exc: InputError, model: str | None, model_path: str | None
                     ) -> InputError:
    """``exc``, raised by the client of ``--url``, naming verify's flags."""
    sent = f"it asked for '{model}'" if model else (
        f"without --model it asks for the certified model's path, {model_path}, which a "
        "server started with --served-model-name does not know")
    fix = {"http.model": f"pass --model with the name the server serves the model under "
                         f"({sent})",
           "http.route": "pass --url as the base its /embeddings route follows (vLLM, TEI "
                         "and Infinity with --url-prefix /v1: http://HOST:PORT/v1), and "
                         f"--model with the name it serves the model under ({sent})",
           "url": "check that the server at --url is up and answers POST <--url>/embeddings, "
                  f"and pass --model with the name it serves the model under ({sent})"}
    return InputError(message=exc.message, field=_SERVED_FIELDS[str(exc.field)],
                      fix=fix[str(exc.field)])


def verify_command(certificate: Path, *, url: str | None = None,
                   model: str | None = None) -> int:
    """0 when this machine's engine (or the endpoint at ``url``) reproduces the
    certificate, 1 (naming the causes it can tell) when it does not."""
    if url is not None:
        _check_url(url)
    cert = read_certificate(certificate)
    variants, plan_for = stored_plans(cert["recipe"],
                                      Path(str(cert.get("recipe_file") or "")),
                                      Path(certificate))
    if cert["variant"] not in variants:  # not --only's slip: the file's two parts disagree
        raise InputError(message=f"the certificate is for variant '{cert['variant']}', "
                         "which the recipe stored in it does not have (its variants: "
                         f"{', '.join(variants)})", file=Path(certificate), field="variant",
                         fix="pass the certificate as 'evalq certify' wrote it (its variant "
                         "and recipe come from one results folder), or certify that results "
                         "folder again")
    plan = plan_for(cert["variant"])
    try:
        found = verify(cert, plan, url=url, model=model)
    except InputError as exc:
        if url is not None and exc.field in _SERVED_FIELDS:
            raise _in_verify_flags(exc, model,
                                   plan.variant(cert["variant"]).model_path) from None
        raise
    print(f"{found.variant}: min cosine {found.min_cosine:.7f} against the certified "
          f"vectors, tolerance 1 - cosine <= {found.tolerance:.2e}")
    for note in found.notes:
        print(f"note: {note} (the vectors still match)")
    if found.matched:
        print("MATCH: this deployment reproduces the certified candidate")
        return 0
    print("MISMATCH: this deployment does not reproduce the certified candidate")
    for cause in found.causes:
        print(f"  cause: {cause}")
    return 1
