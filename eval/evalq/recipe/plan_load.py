"""`evalq load`'s checks that need only the recipe, before any server starts.

A ``load:`` section exists, the variants it names are served over HTTP, launch commands
start openai/tei variants on loopback, every URL is on loopback unless
``load.allow_hosts`` names its host, rerank workloads have a route: exit 2 naming file,
line and field. The result (:class:`evalq.plan.load.LoadPlan`) is what the load test
drives.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from evalq.core.errors import InputError
from evalq.engines.options import EncoderVariant
from evalq.engines.registry import BACKENDS, embedding_backend
from evalq.engines.spec import or_list
from evalq.plan.load import LoadPlan
from evalq.recipe.schema import Recipe
from evalq.recipe.yamlsource import Located
from evalq.retrieve.registry import INDEX_KINDS


def _served(variant: EncoderVariant) -> bool:
    """Whether the sweep can drive it: its backend's spec names a request format."""
    return embedding_backend(variant.backend).load_api is not None


def is_loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def variant_url(variant: EncoderVariant) -> str | None:
    """The URL a variant's server answers at when the recipe names one."""
    if variant.http is not None:
        return variant.http.url
    if variant.vllm is not None and variant.vllm.url:
        return variant.vllm.url
    return None


def check_load(recipe: Recipe, located: Located, file: Path,
               only: list[str] | None) -> LoadPlan:
    """Every recipe-only check, before a server starts (exit 2 with file, line, field)."""

    def fail(message: str, path: tuple[Any, ...], fix: str) -> InputError:
        where, line = located.where(path)
        return InputError(message=message, file=where or file, line=line,
                          field=".".join(str(p) for p in path) or None, fix=fix)

    section = recipe.load
    if section is None:
        raise InputError(message="the recipe has no 'load:' section", file=file, field="load",
                         fix="add load: {workloads: [{name: query, kind: query, slo_p99_ms: "
                         "100, open_loop: {rates: [5, 10, 20]}}]} (see docs/load-testing.md)")
    by_name = {v.name: v for v in recipe.variants}
    served = [v for v in recipe.variants if _served(v)]
    skipped = {v.name: f"backend '{v.backend}' runs inside evalq; there is no server to load"
               for v in recipe.variants if not _served(v)}
    for i, name in enumerate(section.variants or []):
        if name not in by_name:
            raise fail(f"load.variants names unknown variant '{name}'", ("load", "variants", i),
                       f"choose from {', '.join(by_name)}")
        if not _served(by_name[name]):
            raise fail(f"variant '{name}' is not served over HTTP ({skipped[name]})",
                       ("load", "variants", i), "name " + or_list(BACKENDS.names(
                           "embedding", lambda s: s.load_api is not None), "or") + " variants only")
    chosen = [by_name[n] for n in section.variants] if section.variants else served
    databases = check_databases(recipe, fail)
    if only:
        driven = [v.name for v in chosen] + databases
        unknown = sorted(set(only) - set(driven))
        if unknown:
            raise InputError(message=f"--only names variant(s) {', '.join(unknown)}, which "
                             "the load test does not drive", file=file, field="--only",
                             fix=f"choose from {', '.join(driven) or '(none)'}")
        chosen = [v for v in chosen if v.name in only]
        databases = [n for n in databases if n in only]
    if not chosen and not databases:
        raise fail("no variant is served over HTTP, so there is nothing to load", ("load",),
                   "add a variant with backend vllm (evalq starts its server), openai or tei, "
                   "or name a variant with a database index in load.databases")
    for name in section.launch:
        v = by_name.get(name)
        if v is None or embedding_backend(v.backend).serving != "http":
            raise fail(f"load.launch names '{name}', which is not an "
                       + or_list(BACKENDS.names("embedding", lambda s: s.serving == "http"), "or")
                       + " variant",
                       ("load", "launch", name),
                       "launch commands start servers for openai/tei variants; vLLM "
                       "variants are started by evalq itself")
        host = urlsplit(variant_url(v) or "").hostname
        if not is_loopback(host):
            raise fail(f"load.launch starts '{name}' on this machine, but its http.url host "
                       f"is '{host}'", ("load", "launch", name),
                       "set the variant's http.url to http://127.0.0.1:<port>")
    for v in chosen:
        url = variant_url(v)
        if url is None:
            continue
        host = urlsplit(url).hostname
        if not is_loopback(host) and host not in section.allow_hosts:
            i = recipe.variants.index(v)
            path = ("reference",) if i == 0 else ("candidates", i - 1)
            raise fail(f"variant '{v.name}' points at {url}, which is not on this machine; "
                       "a load test sends real traffic, so evalq talks to loopback only unless "
                       "told otherwise", (*path, "http" if v.http else "vllm", "url"),
                       f"add '{host}' to load.allow_hosts if you own that server")
    for i, w in enumerate(section.workloads):
        if w.kind == "rerank" and w.endpoint is None:
            raise fail(
                f"workload '{w.name}' (rerank) cannot run yet: reranker variants (a served "
                "cross-encoder) are not part of this evalq; only an explicit /rerank-style "
                "route can be driven", ("load", "workloads", i),
                "set endpoint: /rerank to drive a server's rerank route (vLLM and Infinity "
                "serve one), or remove the workload")
    return LoadPlan(section, chosen, skipped, databases)


def check_databases(recipe: Recipe, fail: Callable[..., InputError]) -> list[str]:
    """``load.databases``: each names a variant whose index is a database kind and that
    encodes its own vectors, and the load has a query workload to drive it with."""
    section = recipe.load
    assert section is not None
    by_name = {v.name: v for v in recipe.variants}
    kinds = or_list([s.name for s in INDEX_KINDS.specs() if s.database], "or")
    for i, name in enumerate(section.databases):
        where = ("load", "databases", i)
        variant = by_name.get(name)
        if variant is None:
            raise fail(f"load.databases names unknown variant '{name}'", where,
                       f"choose from {', '.join(by_name)}")
        index = getattr(variant, "index", None)
        if index is None or not INDEX_KINDS.get(index.kind).database:
            has = "no index" if index is None else f"a '{index.kind}' index"
            raise fail(f"variant '{name}' has {has}, not a database, so load.databases has "
                       "nothing to drive", where, f"give it index: {{kind: {kinds}}}, or "
                       "remove it from load.databases")
        if getattr(variant, "documents", None) is not None or \
                getattr(variant, "queries", None) is not None:
            raise fail(f"variant '{name}' borrows its vectors (documents: / queries:); the "
                       "database stage encodes a variant's own", where,
                       "name a variant that encodes both sides, or remove it")
        if name in section.launch:
            raise fail(f"variant '{name}' is encoded by the server load.launch starts, which "
                       "runs only during its own load; the database stage encodes its "
                       "vectors before any server starts", where,
                       "attach it to a running server (leave it out of load.launch), or "
                       "name an in-process variant with the same model and index")
    if section.databases and not any(w.kind == "query" for w in section.workloads):
        raise fail("load.databases drives searches, but no workload is kind: query",
                   ("load", "workloads"), "add a workload {name: search, kind: query, "
                   "slo_p99_ms: 50, closed_loop: {concurrency: [1, 4, 16]}}")
    return list(dict.fromkeys(section.databases))
