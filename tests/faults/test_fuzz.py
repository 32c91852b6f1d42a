"""Hypothesis fuzzing of everything that reads user or server input: the recipe loader
(YAML text and recipe-shaped mappings, through the plan stage), BEIR JSONL readers, TREC
qrels and run readers, and the HTTP reply parsers. The only failure allowed is an
InputError (exit 2 with a message); any other exception would be an exit 3 or a
traceback. Each runs through ``fuzzkit.run_fuzzer``, which counts the inputs it tried,
accepted and refused, and fails unless both kinds were seen, so the figure in the fault
table (docs/reliability.md) is what ran and a planted parser bug fails it
(test_fuzz_planted.py)."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from faultkit import write_recipe
from fuzzkit import run_fuzzer
from hypothesis import strategies as st

from evalq.core.errors import InputError
from evalq.data.beir import read_jsonl_records
from evalq.data.trec import read_qrels, read_run
from evalq.engines.capability import DeviceInfo
from evalq.engines.replies import parse_openai_reply, parse_tei_reply
from evalq.recipe.plan import build_plan
from evalq.recipe.schema import recipe_from_located
from evalq.recipe.yamlsource import load_yaml

EXAMPLES = 200

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

@pytest.fixture(scope="module")
def recipe_base(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("fuzz")
    return yaml.safe_load(write_recipe(folder).read_text())


def _plan(text: str) -> None:
    """Load and plan a recipe's text; an InputError is the refusal run_fuzzer counts."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.yaml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        located = load_yaml(path)
        recipe = recipe_from_located(located, path)
        build_plan(recipe, path, located=located, detect=lambda: DeviceInfo("cpu"))


def _beir(lines: list[str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "corpus.jsonl"
        path.write_text("\n".join(lines), encoding="utf-8", errors="surrogatepass")
        read_jsonl_records(path, id_field="_id", text_field="text", title_field="title")


trec_token = st.one_of(st.text(alphabet="qd0123456789-.eE+ x", min_size=0, max_size=6),
                       st.sampled_from(["Q0", "0", "1", "-1", "nan", "inf", "1e309", "2.5"]))
trec_line = st.lists(trec_token, min_size=0, max_size=7).map(
    lambda parts: st_join(parts))


def st_join(parts: list[str]) -> str:
    return ("\t" if len(parts) == 3 else " ").join(parts)


# Well-formed lines mixed in, so accepted files are explored too (run_fuzzer needs both).
good_qrels = st.builds(lambda q, d, r: f"q{q}\td{d}\t{r}", st.integers(0, 3),
                       st.integers(0, 9), st.integers(0, 2))
good_run = st.builds(lambda q, d, r, x: f"q{q} Q0 d{d} {r} {x} run", st.integers(0, 3),
                     st.integers(0, 9), st.integers(1, 9), st.floats(-5, 5))
trec_file = st.one_of(
    st.tuples(st.lists(trec_line, max_size=8), st.booleans(), st.sampled_from(["qrels", "run"])),
    st.tuples(st.lists(good_qrels, min_size=1, max_size=8), st.booleans(), st.just("qrels")),
    st.tuples(st.lists(good_run, min_size=1, max_size=8), st.just(False), st.just("run")))


def _trec(value: tuple[list[str], bool, str]) -> None:
    lines, beir_header, kind = value
    read = {"qrels": read_qrels, "run": read_run}[kind]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "file.tsv"
        path.write_text(("query-id\tcorpus-id\tscore\n" if beir_header else "")
                        + "\n".join(lines), encoding="utf-8")
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


vector = st.lists(st.floats(-1, 1, width=32), min_size=2, max_size=2)
good_reply = st.integers(1, 4).flatmap(lambda n: st.one_of(
    st.tuples(st.lists(vector, min_size=n, max_size=n).map(
        lambda vs: {"data": [{"embedding": v, "index": i} for i, v in enumerate(vs)]}),
        st.just(n), st.just("float"), st.just("openai")),
    st.tuples(st.lists(vector, min_size=n, max_size=n), st.just(n), st.just("float"),
              st.just("tei"))))
replies = st.one_of(st.tuples(reply, st.integers(1, 4), st.sampled_from(["float", "base64"]),
                              st.sampled_from(["openai", "tei", "tei data"])), good_reply)


def _reply(value: tuple[Any, int, str, str]) -> None:
    body, n, fmt, api = value
    parse = {"openai": lambda: parse_openai_reply(body, n, "http://x/v1/embeddings", fmt),
             "tei": lambda: parse_tei_reply(body, n, "http://x/embed"),
             "tei data": lambda: parse_tei_reply(
                 body.get("data") if isinstance(body, dict) else body, n, "http://x/embed")}
    try:
        out = parse[api]()
    except InputError as exc:
        assert "http://x/" in str(exc)
        raise
    vectors = out[0] if isinstance(out, tuple) else out
    assert vectors.shape[0] == n and vectors.dtype.name == "float32"


yaml_text = st.text(alphabet=st.sampled_from(list("abn:{}[]-,'\"&*!|> \n\t#%@?0123456789.")),
                    max_size=120)
FUZZERS: dict[str, tuple[st.SearchStrategy[Any], Callable[[Any], None]]] = {
    "BEIR JSONL": (st.lists(st.one_of(st.text(max_size=40), json_values.map(json.dumps)),
                            max_size=6), _beir),
    "TREC qrels and runs": (trec_file, _trec),
    "HTTP replies": (replies, _reply),
}


def test_recipe_mappings(recipe_base: dict[str, Any]) -> None:
    """Recipe-shaped mappings: the base recipe with up to four keys replaced."""
    run_fuzzer("recipe mappings", EXAMPLES, mutation,
               lambda change: _plan(yaml.safe_dump({**recipe_base, **change})))


def test_recipe_yaml_text(recipe_base: dict[str, Any]) -> None:
    """Raw YAML text; the base recipe with a generated comment line mixed in, so that
    accepted texts are explored too."""
    base = yaml.safe_dump(recipe_base)
    texts = st.one_of(yaml_text, yaml_text.map(
        lambda t: base + "# " + t.replace("\n", " ").replace("\t", " ") + "\n"))
    run_fuzzer("recipe YAML text", EXAMPLES, texts, _plan)


@pytest.mark.parametrize("name", list(FUZZERS))
def test_fuzzer(name: str) -> None:
    strategy, check = FUZZERS[name]
    run_fuzzer(name, EXAMPLES, strategy, check)
