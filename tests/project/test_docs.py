"""The docs cannot drift from the code: generated pages follow their source, the site builds
with --strict, and every command block in the README and docs/ runs or says why not.

Convention: a command a reader types sits in a ```console block, one per line, after
``$ ``. Synopsis blocks (``evalq run RECIPE [-o DIR]``, in ``` or ```text blocks) are not
run, but their subcommand and every flag they show must exist in the parser. ```bash /
```sh / ```shell blocks are refused, so no command hides outside the convention.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from evalq.app.cli import build_parser, main
from evalq.engines.quantize import METHODS, QuantMethod
from evalq.engines.spec import BackendSpec
from evalq.measure.measures import Family, parse_measure
from evalq.measure.registry import FAMILIES
from evalq.recipe.schema import Recipe

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "docs"))
import gen_pages  # noqa: E402  (docs/gen_pages.py: a script, not part of the package)

FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", flags=re.S | re.M)
# evalq subcommands (or flags) cheap enough for the fast tier: no model is loaded.
CHEAP = {"--help", "--version", "validate", "plan", "datasets", "init"}
# Subcommands whose exit code is a verdict: 1 (a gate failed) is a result, not an error.
VERDICT = {"run", "gate", "load", "parity"}
# Command blocks that are not run here, each with the reason (keyed by page and command).
NOT_RUN = {
    ("docs/development/testing.md", "make test"):
        "what CI runs (.ci/run); inside the test suite it would run the suite again",
    ("docs/development/testing.md", "make docs"):
        "its two steps (gen_pages, mkdocs build --strict) run in test_mkdocs_build_strict",
}
# Sections whose commands another test runs verbatim: (page, heading) -> that test.
RUN_ELSEWHERE = {
    ("docs/getting-started.md", "## Using evalq in your own project"):
        "run verbatim against a freshly built wheel by tests/project/test_installed.py",
}


def _pages() -> list[Path]:
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
    return [p for p in pages if "reference" not in p.relative_to(REPO).parts]


def _delegated(page: str, text: str, offset: int) -> str | None:
    for (where, heading), reason in RUN_ELSEWHERE.items():
        start = text.find(heading) if where == page else -1
        if start >= 0:
            end = text.find("\n## ", start + len(heading))
            if start <= offset < (end if end >= 0 else len(text)):
                return reason
    return None


def _blocks() -> list[tuple[str, str, str, int]]:
    """(page, language, body, offset) of every fenced block in the README and docs/."""
    out = []
    for path in _pages():
        text = path.read_text(encoding="utf-8")
        page = path.relative_to(REPO).as_posix()
        out += [(page, m[1], m[2], m.start()) for m in FENCE.finditer(text)]
    return out


def _console_blocks() -> list[tuple[str, list[str]]]:
    """(page, commands) of every console block that this module runs."""
    out = []
    for page, lang, body, offset in _blocks():
        if lang != "console":
            continue
        text = (REPO / page).read_text(encoding="utf-8")
        if _delegated(page, text, offset):
            continue
        commands = [line[2:] for line in body.splitlines() if line.startswith("$ ")]
        commands = [c for c in commands if (page, c) not in NOT_RUN]
        if commands:
            out.append((page, commands))
    return out


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _run_evalq(command: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    argv = shlex.split(command)[1:]
    try:
        code = main(argv)
    except SystemExit as exc:  # --help exits through argparse
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out + out.err


def _expect_ok(page: str, command: str, code: int, output: str) -> None:
    sub = shlex.split(command)[1]
    allowed = {0, 1} if sub in VERDICT else {0}
    assert code in allowed, f"{page}: `{command}` exited {code}:\n{output[-3000:]}"


# --------------------------------------------------------------------- the conventions


def test_commands_sit_in_console_blocks_only() -> None:
    shells = [(page, lang) for page, lang, _, _ in _blocks() if lang in ("bash", "sh", "shell")]
    assert shells == [], "write commands in ```console blocks as `$ command` lines"


def test_every_console_command_is_run_or_has_a_reason() -> None:
    for page, commands in _console_blocks():
        for command in commands:
            assert command.startswith("evalq "), (
                f"{page}: `{command}` is neither an evalq command this module runs nor in "
                "NOT_RUN with a reason")
    assert _console_blocks(), "the README's walk has console commands; none were found"


def test_synopsis_lines_name_real_commands_and_flags() -> None:
    subs = _subparsers(build_parser())
    seen = 0
    for page, lang, body, _ in _blocks():
        if lang not in ("", "text"):
            continue
        for line in body.splitlines():
            if not line.startswith("evalq "):
                continue
            seen += 1
            shown = line.split("#")[0]
            name = shown.split()[1]
            assert name in subs, f"{page}: `{line}` names no evalq command"
            options = {o for a in subs[name]._actions for o in a.option_strings}
            for flag in re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", shown):
                assert flag in options, f"{page}: `{line}`: evalq {name} has no {flag}"
    assert seen >= 12  # the README's command list alone has one line per command


# ------------------------------------------------------------------- running the blocks


def test_cheap_commands_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    """Each block in a fresh folder, in order, up to its first command that loads a model
    (the rest runs in test_model_commands_run)."""
    ran = 0
    for i, (page, commands) in enumerate(_console_blocks()):
        work = tmp_path / f"block-{i}"
        work.mkdir()
        monkeypatch.chdir(work)
        for command in commands:
            argv = shlex.split(command)[1:]
            if not (argv[0] in CHEAP or "--help" in argv):
                break
            _expect_ok(page, command, *_run_evalq(command, capsys))
            ran += 1
    assert ran >= 3  # the README walk's init, validate and plan


@pytest.mark.model
@pytest.mark.slow
def test_model_commands_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    """Every block that loads a model, whole and in order, in a fresh folder."""
    for i, (page, commands) in enumerate(_console_blocks()):
        if all(shlex.split(c)[1] in CHEAP or "--help" in c for c in commands):
            continue
        work = tmp_path / f"block-{i}"
        work.mkdir()
        monkeypatch.chdir(work)
        for command in commands:
            _expect_ok(page, command, *_run_evalq(command, capsys))


# ------------------------------------------------------------------- generated pages


def test_recipe_reference_follows_the_schema() -> None:
    class Wider(Recipe):
        brand_new_key: int = 7

    plain, wider = gen_pages.recipe_reference(Recipe), gen_pages.recipe_reference(Wider)
    assert "`brand_new_key`" in wider and "`brand_new_key`" not in plain
    for key in Recipe.model_fields:
        assert f"| `{key}` |" in plain
    assert "## Variant" in plain and "(#variant)" in plain


def test_measure_reference_follows_the_registry() -> None:
    extra = Family("brandnew", "reference", needs_cutoff=True, higher_is_better=False,
                   description="a measure only this test knows")
    plain = gen_pages.measures_reference(FAMILIES)
    wider = gen_pages.measures_reference({**FAMILIES, "brandnew": extra})
    assert "`brandnew@k`" in wider and "a measure only this test knows" in wider
    assert "`brandnew@k`" not in plain
    row = next(line for line in wider.splitlines() if "`brandnew@k`" in line)
    assert "lower is better" in row and "not declared" in row
    for family in FAMILIES.values():
        assert family.description.replace("|", "\\|") in plain


def test_every_measure_has_bounds_and_trec_eval_names_parse() -> None:
    assert set(FAMILIES) <= set(gen_pages.BOUNDS), "add the new family's range to BOUNDS"
    for family, name in gen_pages.TREC_EVAL.items():
        spelled = name.split()[0].replace("_k", "_10")
        if spelled == "recip_rank":
            spelled = "recip_rank_10"
        assert parse_measure(spelled).family == family, (family, spelled)


def test_cli_reference_follows_the_parser() -> None:
    parser = argparse.ArgumentParser(prog="evalq")
    sub = parser.add_subparsers(dest="command")
    cmd = sub.add_parser("brand-new", help="a command only this test knows")
    cmd.add_argument("--shiny", choices=["a", "b"], default="a", help="a flag")
    page = gen_pages.cli_reference(parser)
    assert "## evalq brand-new" in page and "a command only this test knows" in page
    assert "| `--shiny` | SHINY | `a`, `b` | `a` | a flag |" in page
    real = gen_pages.cli_reference(build_parser())
    assert "brand-new" not in real
    for name in _subparsers(build_parser()):
        assert f"## evalq {name}\n" in real


def test_support_table_follows_the_declarations() -> None:
    plain = gen_pages.support_reference(METHODS)
    assert plain == gen_pages.support_reference(METHODS, gen_pages.backend_declarations())
    extra = QuantMethod("brand-new-int4", "a method only this test knows",
                        METHODS["torch-dynamic-int8"].params_model, lambda *a: None,
                        backends=("tei",), devices=("cuda",))
    wider = gen_pages.support_reference({**METHODS, "brand-new-int4": extra})
    row = next(line for line in wider.splitlines() if "`brand-new-int4`" in line)
    cells = row.rstrip(" |").split(" | ")
    assert cells[-1] == "(no parameters)" and cells.count("cuda") == 1
    assert {c for c in cells[2:-1] if c != "cuda"} == {"—"}
    backends = {**gen_pages.backend_declarations(),
                "brand-new-server": BackendSpec("brand-new-server", "embedding", "http",
                                                lambda *a: None, quantized_by="server",
                                                devices=(), dtypes=("float16",))}
    assert "`brand-new-server`" in gen_pages.support_reference(METHODS, backends)
    assert "`brand-new-server`" not in plain


# ------------------------------------------------------------------------ the site


@pytest.mark.process
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    """What `make docs` does: generate the reference pages, then a strict build (a broken
    link, a missing page or a missing snippet fails it)."""
    gen_pages.write()
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(REPO / "mkdocs.yml"),
         "-d", str(tmp_path / "site")],
        cwd=REPO, capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    site = tmp_path / "site"
    for page in ("index.html", "reference/cli/index.html", "reference/recipe-keys/index.html",
                 "reference/measures/index.html", "reference/support/index.html",
                 "reference/benchmarks/index.html", "development/architecture/index.html"):
        assert (site / page).is_file(), page
    ci = (site / "reports-and-ci" / "index.html").read_text(encoding="utf-8")
    assert "embedding-quality-gate" in ci  # the GitHub example, inlined by the snippet


def test_results_page_follows_the_typed_models() -> None:
    from pydantic import Field

    from evalq.results.schema import RunManifest, RunSummary

    class Wider(RunSummary):
        brand_new_key: int = Field(default=0, description="a key only this test knows")

    plain = gen_pages.results_reference()
    assert "`schema_version`" in plain and "`failed_gates`" in plain
    wider = gen_pages.results_reference(Wider, RunManifest)
    assert "`brand_new_key`" in wider and "`brand_new_key`" not in plain


def test_contracts_page_quotes_the_import_linter_configuration() -> None:
    config = gen_pages.import_contracts()
    plain = gen_pages.contracts_reference(config)
    for contract in config["contracts"]:
        assert f"## {contract['name']}" in plain
    extra = {**config, "contracts": [*config["contracts"], {
        "name": "A contract only this test knows", "type": "forbidden",
        "source_modules": ["evalq.core"], "forbidden_modules": ["evalq.app"]}]}
    wider = gen_pages.contracts_reference(extra)
    assert "## A contract only this test knows" in wider and "only this test" not in plain


def _bench_record_module():
    """bench/record.py loaded by path: the tests do not put bench/ on sys.path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_record", REPO / "bench" / "record.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmarks_page_renders_the_committed_records(tmp_path: Path) -> None:
    empty = gen_pages.benchmarks_reference(tmp_path / "none")
    assert "No record is committed yet" in empty
    record = _bench_record_module()
    fake_host = {"cpu": "Fake CPU 9000", "logical_cores": 3, "matmul_fp32_gflops": 123.4}
    path = record.write_record("fakebench", figures={"seconds": {"evalq": 1.0, "peer": 4.0}},
                               ratios={"evalq / peer seconds": 0.25},
                               peer="a peer only this test knows", out_dir=tmp_path,
                               host_info=fake_host)
    assert path.parent == tmp_path and path.name.startswith("fakebench-")
    (tmp_path / "not-a-record.json").write_text('{"rows": []}', encoding="utf-8")
    page = gen_pages.benchmarks_reference(tmp_path)
    assert "## fakebench" in page and "No record is committed yet" not in page
    row = next(line for line in page.splitlines() if "`evalq / peer seconds`" in line)
    for cell in ("0.25×", "a peer only this test knows", "Fake CPU 9000, 3 cores",
                 "matmul peak 123.4 GFLOP/s"):
        assert cell in row, cell
    figures = page[page.index("### Figures of `fakebench-"):]
    assert "| `seconds.evalq` | 1 |" in figures and "| `seconds.peer` | 4 |" in figures
    assert "benchmarks.md" in gen_pages.pages()


RECORD_NAME = re.compile(r"`([a-z_]+-\d{8}-[0-9a-f]{7})`")


def test_every_quoted_record_is_committed() -> None:
    """A figure quoted in the docs names the record behind it; the name must be a file
    under bench/results/, or the figure has nothing behind it."""
    pages = [*REPO.glob("docs/*.md"), *REPO.glob("docs/development/*.md"), REPO / "README.md"]
    named = {(page.name, name) for page in pages
             for name in RECORD_NAME.findall(page.read_text(encoding="utf-8"))}
    assert any(page == "benchmarks.md" for page, _ in named)
    missing = sorted((page, name) for page, name in named
                     if not (REPO / "bench" / "results" / f"{name}.json").is_file())
    assert not missing, f"records quoted but not committed under bench/results/: {missing}"


def test_each_benchmarks_section_cites_a_record_or_says_it_has_none() -> None:
    text = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    assert len(sections) >= 8
    for section in sections:
        title = section.splitlines()[0]
        if title == "The bench scripts":
            continue
        cites = RECORD_NAME.search(section) is not None
        says_none = re.search(r"No record yet|No bench script measures it|Not measured|"
                              r"assertions the tests hold", section) is not None
        assert cites or says_none, f"section '{title}' quotes figures without a record"


def test_install_extras_named_in_the_docs_are_the_makefiles() -> None:
    """README and Getting started say what `make demo` / `make test` install; the set of
    extras they name is the Makefile's install line, and each extra exists in pyproject."""
    makefile = (REPO / "Makefile").read_text()
    installed = re.search(r"pip install -q -e '\.\[([\w,-]+)\]'", makefile)
    assert installed, "the Makefile's install line moved"
    extras = set(installed.group(1).split(","))
    pyproject = (REPO / "pyproject.toml").read_text()
    declared = set(re.findall(r"^([\w-]+) = \[", pyproject.split(
        "[project.optional-dependencies]", 1)[1].split("\n[", 1)[0], flags=re.M))
    assert extras <= declared, extras - declared
    for page in ("README.md", "docs/getting-started.md"):
        named = re.search(r"install `\.\[([\w,-]+)\]`", (REPO / page).read_text())
        assert named and set(named.group(1).split(",")) == extras, (page, extras)
