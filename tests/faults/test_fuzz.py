"""Hypothesis fuzzing of everything that reads user or server input: the recipe loader
(YAML text and recipe-shaped mappings, through the plan stage), BEIR JSONL readers, TREC
qrels and run readers, and the HTTP reply parsers. The only failure allowed is an
InputError (exit 2 with a message); any other exception would be an exit 3 or a
traceback. Each test counts the inputs it tried and asserts the count, so the figure in
the fault table (docs/reliability.md) is what ran."""

from __future__ import annotations

import contextlib
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from faultkit import write_recipe
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalq.core.errors import InputError

EXAMPLES = 200
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12))
json_values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=12)

RECIPE_KEYS = ["name", "model", "datasets", "reference", "candidates", "metrics",
               "reference_metrics", "gates", "stats", "max_queries", "max_docs",
               "cache_chunk", "encoding", "include", "output", "batch_tokens", "parity"]
VARIANT_KEYS = ["name", "backend", "dtype", "device", "quantization", "vectors",
                "encoding", "http", "vllm", "model", "batch_tokens"]
variant = st.dictionaries(st.sampled_from(VARIANT_KEYS), json_values, max_size=5)
mutation = st.dictionaries(
    st.sampled_from(RECIPE_KEYS),
    st.one_of(json_values, variant, st.lists(variant, max_size=3),
              st.sampled_from(["nDCG@10", "R@1000000000", "cosine", "x@y", "RBO(p=2)@5"])),
    max_size=4)

COUNTS: dict[str, int] = {}


def _tried(name: str) -> None:
    COUNTS[name] = COUNTS.get(name, 0) + 1


@pytest.fixture(scope="module")
def recipe_base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("fuzz")
    return yaml.safe_load(write_recipe(folder).read_text())


def _plan_or_input_error(text: str, folder: Path) -> None:
    from evalq.engines.capability import DeviceInfo
    from evalq.recipe.plan import build_plan
    from evalq.recipe.schema import recipe_from_located
    from evalq.recipe.yamlsource import load_yaml

    path = folder / "fuzz.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    try:
        located = load_yaml(path)
        recipe = recipe_from_located(located, path)
        build_plan(recipe, path, located=located, detect=lambda: DeviceInfo("cpu"))
    except InputError as exc:
        assert str(exc)  # a message, never empty


@FUZZ
@given(mutation)
def test_recipe_mappings(recipe_base: dict[str, Any], change: dict[str, Any]) -> None:
    _tried("recipe mappings")
    with tempfile.TemporaryDirectory() as tmp:
        _plan_or_input_error(yaml.safe_dump({**recipe_base, **change}), Path(tmp))


@FUZZ
@given(st.text(alphabet=st.sampled_from(list("abn:{}[]-,'\"&*!|> \n\t#%@?0123456789.")),
               max_size=120))
def test_recipe_yaml_text(text: str) -> None:
    _tried("recipe YAML text")
    with tempfile.TemporaryDirectory() as tmp:
        _plan_or_input_error(text, Path(tmp))


@FUZZ
@given(st.lists(st.one_of(st.text(max_size=40), json_values.map(json.dumps)), max_size=6))
def test_beir_jsonl(lines: list[str]) -> None:
    from evalq.data.beir import read_jsonl_records

    _tried("BEIR JSONL")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "corpus.jsonl"
        path.write_text("\n".join(lines), encoding="utf-8", errors="surrogatepass")
        with contextlib.suppress(InputError):
            read_jsonl_records(path, id_field="_id", text_field="text", title_field="title")


trec_token = st.one_of(st.text(alphabet="qd0123456789-.eE+ x", min_size=0, max_size=6),
                       st.sampled_from(["Q0", "0", "1", "-1", "nan", "inf", "1e309", "2.5"]))
trec_line = st.lists(trec_token, min_size=0, max_size=7).map(
    lambda parts: st_join(parts))


def st_join(parts: list[str]) -> str:
    return ("\t" if len(parts) == 3 else " ").join(parts)


@FUZZ
@given(st.lists(trec_line, max_size=8), st.booleans())
def test_trec_qrels_and_runs(lines: list[str], beir_header: bool) -> None:
    from evalq.data.trec import read_qrels, read_run

    _tried("TREC qrels and runs")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "file.tsv"
        path.write_text(("query-id\tcorpus-id\tscore\n" if beir_header else "")
                        + "\n".join(lines), encoding="utf-8")
        for read in (read_qrels, read_run):
            with contextlib.suppress(InputError):
                read(path)


embedding = st.one_of(st.lists(st.one_of(st.floats(width=32), st.integers(-5, 5),
                                         st.text(max_size=2), st.none()), max_size=4),
                      st.text(max_size=8), json_values)
item = st.one_of(st.fixed_dictionaries({"embedding": embedding},
                                       optional={"index": st.one_of(st.integers(-2, 5),
                                                                    json_values)}),
                 json_values)
reply = st.one_of(st.fixed_dictionaries({"data": st.one_of(st.lists(item, max_size=4),
                                                           json_values)},
                                        optional={"model": json_values}),
                  json_values)


@FUZZ
@given(reply, st.integers(1, 4), st.sampled_from(["float", "base64"]))
def test_openai_and_tei_replies(body: Any, n: int, fmt: str) -> None:
    from evalq.engines.replies import parse_openai_reply, parse_tei_reply

    _tried("HTTP replies")
    for parse in (lambda: parse_openai_reply(body, n, "http://x/v1/embeddings", fmt),
                  lambda: parse_tei_reply(body, n, "http://x/embed"),
                  lambda: parse_tei_reply(body.get("data") if isinstance(body, dict) else body,
                                          n, "http://x/embed")):
        try:
            out = parse()
        except InputError as exc:
            assert "http://x/" in str(exc)
            continue
        vectors = out[0] if isinstance(out, tuple) else out
        assert vectors.shape[0] == n and vectors.dtype.name == "float32"


def test_every_fuzzer_ran_its_inputs() -> None:
    """Runs last in this module: each fuzzer tried EXAMPLES inputs (the fault table's
    figure, docs/reliability.md)."""
    print(f"\nfuzz inputs tried: {json.dumps(COUNTS)}")
    assert set(COUNTS) == {"recipe mappings", "recipe YAML text", "BEIR JSONL",
                           "TREC qrels and runs", "HTTP replies"}
    assert all(count >= EXAMPLES for count in COUNTS.values()), COUNTS
