"""The structure rules import-linter cannot check, read from the source with ``ast``.

``make lint`` runs import-linter for the rules between parts (``[tool.importlinter]`` in
pyproject.toml). What it cannot see is checked here, over every module of the package:

- evalq's own imports sit at module top; an import inside a function is allowed only to
  delay a heavy optional third-party library (an evalq import there used to hide cycles);
- no module imports another module's ``_private`` name;
- modules stay under 500 lines and functions under 80;
- only the app (``evalq/app/``) prints, exits or turns exceptions into exit codes: no other
  module calls ``print()``, ``sys.exit`` / ``os._exit`` / ``exit()`` or raises
  ``SystemExit``, names an ``EXIT_*`` code, returns a number from an ``except`` block, or
  turns a programming error (``Exception``, ``AttributeError``, ``TypeError``,
  ``KeyError``, ...) met inside evalq's own code into an ``InputError`` (exit 2): bad
  input is refused where a file or value is parsed, and any other exception is evalq's
  bug (exit 3, traceback logged). Progress lines go through logging (``evalq.core.messages``,
  shown by ``evalq.app.console``).

The package root (``evalq/__init__.py``) is the one exception to the first rule: every
``import evalq.<part>`` runs it first, so it must stay a leaf, and it resolves the public
API (``evalq.run``, ``evalq.load_results``) on first attribute access instead.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "eval" / "evalq"
ROOT_INIT = PACKAGE / "__init__.py"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def _rel(path: Path) -> str:
    return str(path.relative_to(PACKAGE)) if path.is_relative_to(PACKAGE) else path.name


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    return {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _in_function(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return True
    return False


def _evalq_imports(tree: ast.AST) -> Iterator[tuple[ast.stmt, str, list[str]]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module and (
                node.module == "evalq" or node.module.startswith("evalq.")):
            yield node, node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "evalq" or alias.name.startswith("evalq."):
                    yield node, alias.name, []


def function_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    parents = _parents(tree)
    return [f"{_rel(path)}:{node.lineno} {module}"
            for node, module, _ in _evalq_imports(tree) if _in_function(node, parents)]


def private_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{_rel(path)}:{node.lineno} {module}.{name}"
            for node, module, names in _evalq_imports(tree)
            for name in names if name.startswith("_") and not name.startswith("__")]


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{_rel(path)}:{node.lineno} {node.name} "
            f"({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno is not None and node.end_lineno - node.lineno + 1 >= limit]


def test_evalq_imports_sit_at_module_top() -> None:
    found = [hit for path in modules() if path != ROOT_INIT for hit in function_imports(path)]
    assert found == []


def test_no_module_imports_a_private_name_of_another() -> None:
    assert [hit for path in modules() for hit in private_imports(path)] == []


def test_modules_stay_under_500_lines() -> None:
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text(encoding="utf-8").splitlines())
             for p in modules()}
    assert {name: n for name, n in sizes.items() if n >= MAX_MODULE_LINES} == {}


def test_functions_stay_under_80_lines() -> None:
    assert [hit for path in modules() for hit in long_functions(path)] == []


def test_quantization_imports_nothing_else_of_the_engines() -> None:
    """DESIGN.md: engines/quantize does not import the rest of engines (a method is a
    wrapper around loading a model, not a backend), so a backend can use any method."""
    quantize = PACKAGE / "engines" / "quantize"
    found = [f"{_rel(path)}:{node.lineno} {module}"
             for path in sorted(quantize.rglob("*.py"))
             for node, module, _ in _evalq_imports(ast.parse(path.read_text(encoding="utf-8")))
             if module.startswith("evalq.engines") and not module.startswith(
                 "evalq.engines.quantize")]
    assert found == []


@pytest.mark.parametrize(("source", "expected"), [
    ("def f():\n    from evalq.core import errors\n", 1),
    ("from evalq.core import errors\ndef f():\n    import torch\n", 0),
    ("def f():\n    import evalq.run\n", 1),
])
def test_the_checks_see_what_they_are_meant_to(tmp_path: Path, source: str,
                                               expected: int) -> None:
    """The checkers find a planted violation (so an empty list above means something)."""
    sample = tmp_path / "probe.py"
    sample.write_text(source, encoding="utf-8")
    assert len(function_imports(sample)) == expected


def test_private_and_length_checks_see_a_planted_violation(tmp_path: Path) -> None:
    sample = tmp_path / "probe.py"
    # a function of exactly MAX_FUNCTION_LINES lines: "under 80" refuses 80 itself
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 1))
    sample.write_text(f"from evalq.core.errors import _hidden\ndef f():\n{body}\n",
                      encoding="utf-8")
    assert len(private_imports(sample)) == 1
    assert len(long_functions(sample)) == 1


# -- only the app prints or maps exceptions to exit codes ---------------------------------

APP = PACKAGE / "app"
# Each exemption with the reason it is not the app's business. The pydocs worker is a
# separate program (run as a child process's source, never imported by evalq) whose exit
# status its parent reads; the vLLM server guard ends the process on SIGTERM as the
# default action would when nothing else handles it, after stopping the servers.
EXIT_EXEMPT = {"data/pydocs_worker.py": "a child process's own program",
               "engines/vllm_server.py": "SIGTERM without an earlier handler"}
EXIT_CODES_DEFINED = "core/failure.py"  # EXIT_BUG, EXIT_SIGINT, EXIT_SIGTERM live here
# What a handler may not turn into bad input when it was raised by evalq's own code.
PROGRAMMING_ERRORS = {"Exception", "BaseException", "AttributeError", "TypeError", "KeyError",
                      "IndexError", "LookupError", "NameError", "AssertionError"}


def _outside_app() -> list[Path]:
    return [p for p in modules() if not p.is_relative_to(APP)]


def console_calls(path: Path) -> list[str]:
    """``print()``, ``exit()`` / ``quit()``, ``sys.exit``, ``os._exit`` and ``raise
    SystemExit`` in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Name) and func.id in ("print", "exit", "quit"):
                found.append(f"{_rel(path)}:{node.lineno} {func.id}()")
            elif (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
                  and (func.value.id, func.attr) in (("sys", "exit"), ("os", "_exit"))):
                found.append(f"{_rel(path)}:{node.lineno} {func.value.id}.{func.attr}()")
        elif isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id == "SystemExit":
                found.append(f"{_rel(path)}:{node.lineno} raise SystemExit")
    return found


def _caught(handler: ast.ExceptHandler) -> set[str]:
    if handler.type is None:
        return {"BaseException"}
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return {k.id if isinstance(k, ast.Name) else k.attr if isinstance(k, ast.Attribute)
            else "?" for k in kinds}


def _root(node: ast.AST) -> str | None:
    """The name a call chain starts from (``a`` of ``a.b(c).d()``)."""
    while isinstance(node, ast.Attribute | ast.Call | ast.Subscript):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def _own_names(tree: ast.Module) -> set[str]:
    """Names that stand for evalq's code in a module: what it imports from evalq and the
    functions and classes it defines."""
    names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    for node, _, _ in _evalq_imports(tree):
        if isinstance(node, ast.ImportFrom):
            names |= {a.asname or a.name for a in node.names}
        else:
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def _raises_input_error(handler: ast.ExceptHandler) -> bool:
    return any(isinstance(n, ast.Raise) and isinstance(n.exc, ast.Call)
               and _root(n.exc.func) == "InputError" for n in ast.walk(handler))


def exit_code_mappings(path: Path) -> list[str]:
    """Where ``path`` maps exceptions to exit codes: an ``except`` block that returns a
    number or an ``EXIT_*`` code, a use of an ``EXIT_*`` name, and a handler that turns a
    programming error raised inside evalq's own code (a call of an evalq name, or a
    ``yield``: the wrapper of a caller's block) into an ``InputError``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    rel, own, found = _rel(path), _own_names(tree), []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Name) and node.id.startswith("EXIT_")
                and rel != EXIT_CODES_DEFINED) or (
                isinstance(node, ast.Attribute) and node.attr.startswith("EXIT_")):
            found.append(f"{rel}:{node.lineno} uses {getattr(node, 'id', None) or node.attr}")
        if not isinstance(node, ast.Try):
            continue
        body = [n for stmt in node.body for n in ast.walk(stmt)]
        ours = {_root(n.func) for n in body if isinstance(n, ast.Call)} & own
        wraps = any(isinstance(n, ast.Yield | ast.YieldFrom) for n in body)
        for handler in node.handlers:
            if any(isinstance(n, ast.Return) and isinstance(n.value, ast.Constant)
                   and type(n.value.value) is int for n in ast.walk(handler)):
                found.append(f"{rel}:{handler.lineno} except returns an exit code")
            bugs = _caught(handler) & PROGRAMMING_ERRORS
            if bugs and _raises_input_error(handler) and (ours or wraps):
                what = "a yield" if wraps else ", ".join(sorted(ours))
                found.append(f"{rel}:{handler.lineno} {'/'.join(sorted(bugs))} from "
                             f"{what} becomes an InputError")
    return found


def test_only_the_app_prints_or_exits() -> None:
    found = [hit for path in _outside_app() for hit in console_calls(path)
             if _rel(path) not in EXIT_EXEMPT or "print()" in hit]
    assert found == []


def test_only_the_app_maps_exceptions_to_exit_codes() -> None:
    assert [hit for path in _outside_app() for hit in exit_code_mappings(path)] == []


def test_the_exemptions_are_still_needed() -> None:
    """An exemption whose module no longer exits is removed, not kept as a loophole."""
    for rel in EXIT_EXEMPT:
        assert console_calls(PACKAGE / rel), rel


@pytest.mark.parametrize(("source", "expected"), [
    ("print('x')\n", 1),
    ("import sys\nsys.exit(2)\n", 1),
    ("import os\nos._exit(3)\n", 1),
    ("raise SystemExit(2)\n", 1),
    ("exit()\n", 1),
    ("console.print('x')\nlog.info('x')\n", 0),
])
def test_the_console_check_sees_a_planted_call(tmp_path: Path, source: str,
                                               expected: int) -> None:
    sample = tmp_path / "probe.py"
    sample.write_text(source, encoding="utf-8")
    assert len(console_calls(sample)) == expected


CATCH_ALL = """
import contextlib
from evalq.core.errors import InputError

@contextlib.contextmanager
def damaged():
    try:
        yield
    except (AttributeError, TypeError, KeyError) as exc:
        raise InputError(message=str(exc)) from None
"""
AROUND_OUR_CODE = """
from evalq.core.errors import InputError
from evalq.execute.summarize import build_summary

def regate(recipe, variants, folder):
    try:
        return build_summary(recipe, variants, folder)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(message=str(exc)) from None
"""
AT_THE_PARSER = """
import json
from pydantic import ValidationError
from evalq.core.errors import InputError

def parse(path, model):
    try:
        data = json.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(message=str(exc), file=path) from None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InputError(message=str(exc), file=path) from None
"""
LIBRARY_CALL = """
from evalq.core.errors import InputError

def open_graph(onnx, path):
    try:
        return onnx.load(str(path))
    except Exception as exc:  # the library raises many kinds for a corrupt file
        raise InputError(message=str(exc), file=path) from None
"""
RETURNS_A_CODE = """
def command(run):
    try:
        return run()
    except KeyboardInterrupt:
        return 130
"""
NAMES_A_CODE = """
from evalq.core import failure

def command(exc):
    return failure.EXIT_BUG
"""


@pytest.mark.parametrize(("source", "expected"), [
    (CATCH_ALL, 1), (AROUND_OUR_CODE, 1), (RETURNS_A_CODE, 1), (NAMES_A_CODE, 1),
    (AT_THE_PARSER, 0), (LIBRARY_CALL, 0),
])
def test_the_exit_code_check_sees_a_planted_mapping(tmp_path: Path, source: str,
                                                    expected: int) -> None:
    """The two catch-alls this rule removed (a results-folder wrapper around report code,
    and one around the gate decision) are found; parsing a file is not."""
    sample = tmp_path / "probe.py"
    sample.write_text(source, encoding="utf-8")
    assert len(exit_code_mappings(sample)) == expected, exit_code_mappings(sample)


# What the recipe may import of the parts below it. The recipe composes what the other
# parts declare; it never imports their implementations. Core is shared by every part.
DECLARATIONS = frozenset({
    "evalq.engines.options",  # backend option models, EncoderVariant, RerankerModel
    "evalq.engines.spec",  # BackendSpec and what a backend declares about itself
    "evalq.encode.options",  # ExecutorSpec
    "evalq.retrieve.kinds",  # the index protocol and the options base of a kind
    "evalq.plan.types",  # the Plan the recipe's plan builder fills in
    "evalq.plan.load",  # the load: and capacity: sections, LoadPlan
    "evalq.plan.loadbudget",  # the load schedule's bounds
    "evalq.plan.sensitivity",  # the batch_sensitivity: block
    "evalq.plan.gates",  # GateConfig, StatsOptions, gate_spec
    "evalq.plan.pipelines",  # the pipelines: models
    "evalq.plan.variant",  # SearchedVariant: a variant and its index kind
    "evalq.plan.sides",  # borrowed sides: documents:/queries:, vector files, SidePlan
    "evalq.plan.run",  # RunSections, ReportOptions: the deciding sections as written
    "evalq.plan.search",  # the search: section and the grid it spans
})
# Registries: the names and declarations of one kind of extension (recipe choices and
# checks are read from them, never from a list of their own).
REGISTRIES = frozenset({
    "evalq.engines.registry", "evalq.engines.quantize", "evalq.measure.registry",
    "evalq.measure.measures", "evalq.retrieve.registry",
})
# What the plan (recipe/plan*.py) reads before any model loads: a model folder's config
# and tokenizer files, the machine's device, dataset manifests. Only the plan may.
PLAN_INSPECTIONS = frozenset({
    "evalq.engines.modelinfo", "evalq.engines.capability", "evalq.engines.lasttoken",
    "evalq.data.manifest",
    "evalq.retrieve.stored_vectors",  # a pgvector table's / Qdrant shard's ids and width
    "evalq.data.vectorfiles",  # a vector file's ids and parquet columns, read as the run will
    "evalq.encode.rates",  # the encoding rates earlier runs measured here (time estimate)
})


def recipe_imports_beyond_declarations(paths: list[Path]) -> list[str]:
    """Imports of recipe modules that reach a lower part's implementation."""
    found = []
    for path in paths:
        allowed = DECLARATIONS | REGISTRIES
        if path.name.startswith("plan"):
            allowed |= PLAN_INSPECTIONS
        for node, module, _ in _evalq_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if module.startswith(("evalq.recipe", "evalq.core")) or module in allowed:
                continue
            found.append(f"{_rel(path)}:{node.lineno} {module}")
    return found


def test_the_recipe_imports_only_declarations_of_lower_parts() -> None:
    assert recipe_imports_beyond_declarations(
        sorted((PACKAGE / "recipe").rglob("*.py"))) == []


def test_the_declaration_check_sees_an_implementation_import(tmp_path: Path) -> None:
    schema = tmp_path / "schema.py"
    schema.write_text("from evalq.engines.options import OnnxOptions\n"
                      "from evalq.engines.onnx_backend import build\n"
                      "from evalq.engines.modelinfo import resolve_settings\n", encoding="utf-8")
    plan = tmp_path / "plan.py"
    plan.write_text("from evalq.engines.modelinfo import resolve_settings\n", encoding="utf-8")
    assert recipe_imports_beyond_declarations([schema, plan]) == [
        "schema.py:2 evalq.engines.onnx_backend", "schema.py:3 evalq.engines.modelinfo"]


# Parts that take their own options and the plan, never a recipe object (issue 28).
# A part is a package folder or one module.
RECIPE_FREE = ("engines", "encode", "retrieve", "plan", "execute")


def _part_files(part: str) -> list[Path]:
    path = PACKAGE / part
    return [path] if path.suffix == ".py" else sorted(path.rglob("*.py"))


def recipe_parameters(paths: list[Path]) -> list[str]:
    """Functions with a parameter named ``recipe`` or annotated with a recipe type."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            for arg in args:
                note = ast.unparse(arg.annotation) if arg.annotation is not None else ""
                if arg.arg == "recipe" or "Recipe" in note.replace("RecipeSource", ""):
                    found.append(f"{_rel(path)}:{node.lineno} {node.name}({arg.arg})")
    return found


def test_engines_encode_search_and_the_load_test_take_no_recipe() -> None:
    paths = sorted(p for part in RECIPE_FREE for p in _part_files(part))
    assert paths and recipe_parameters(paths) == []


def test_the_recipe_parameter_check_sees_one(tmp_path: Path) -> None:
    sample = tmp_path / "probe.py"
    sample.write_text("def f(recipe, x):\n    pass\ndef g(r: 'Recipe'):\n    pass\n"
                      "def h(plan: Plan):\n    pass\n", encoding="utf-8")
    assert recipe_parameters([sample]) == ["probe.py:1 f(recipe)", "probe.py:3 g(r)"]
