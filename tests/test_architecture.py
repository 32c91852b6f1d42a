"""The structure rules import-linter cannot check, read from the source with ``ast``.

``make lint`` runs import-linter for the rules between parts (``[tool.importlinter]`` in
pyproject.toml). What it cannot see is checked here, over every module of the package:

- evalq's own imports sit at module top; an import inside a function is allowed only to
  delay a heavy optional third-party library (an evalq import there used to hide cycles);
- no module imports another module's ``_private`` name;
- modules stay under 500 lines and functions under 80.

The package root (``evalq/__init__.py``) is the one exception to the first rule: every
``import evalq.<part>`` runs it first, so it must stay a leaf, and it resolves the public
API (``evalq.run``, ``evalq.load_results``) on first attribute access instead.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "eval" / "evalq"
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
            and node.end_lineno is not None and node.end_lineno - node.lineno + 1 > limit]


def test_evalq_imports_sit_at_module_top() -> None:
    found = [hit for path in modules() if path != ROOT_INIT for hit in function_imports(path)]
    assert found == []


def test_no_module_imports_a_private_name_of_another() -> None:
    assert [hit for path in modules() for hit in private_imports(path)] == []


def test_modules_stay_under_500_lines() -> None:
    sizes = {str(p.relative_to(PACKAGE)): len(p.read_text(encoding="utf-8").splitlines())
             for p in modules()}
    assert {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES} == {}


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
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    sample.write_text(f"from evalq.core.errors import _hidden\ndef f():\n{body}\n",
                      encoding="utf-8")
    assert len(private_imports(sample)) == 1
    assert len(long_functions(sample)) == 1


# What the recipe may import of the parts below it. The recipe composes what the other
# parts declare; it never imports their implementations. Core is shared by every part.
DECLARATIONS = frozenset({
    "evalq.engines.options",  # backend option models, EncoderVariant, RerankerModel
    "evalq.engines.spec",  # BackendSpec and what a backend declares about itself
    "evalq.encode.options",  # ExecutorSpec
    "evalq.retrieve.options",  # IndexSpec, Bm25Options
    "evalq.plan.types",  # the Plan the recipe's plan builder fills in
    "evalq.plan.load",  # the load: and capacity: sections, LoadPlan
    "evalq.plan.loadbudget",  # the load schedule's bounds
    "evalq.plan.sensitivity",  # the batch_sensitivity: block
    "evalq.plan.gates",  # GateConfig, StatsOptions, gate_spec
    "evalq.plan.pipelines",  # the pipelines: models
})
# Registries: the names and declarations of one kind of extension (recipe choices and
# checks are read from them, never from a list of their own).
REGISTRIES = frozenset({
    "evalq.engines.registry", "evalq.engines.quantize", "evalq.measure.registry",
    "evalq.measure.measures",
})
# What the plan (recipe/plan*.py) reads before any model loads: a model folder's config
# and tokenizer files, the machine's device, dataset manifests. Only the plan may.
PLAN_INSPECTIONS = frozenset({
    "evalq.engines.modelinfo", "evalq.engines.capability", "evalq.engines.lasttoken",
    "evalq.data.manifest",
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
RECIPE_FREE = ("engines", "encode", "retrieve", "plan", "execute/load")


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
    paths = sorted(p for part in RECIPE_FREE for p in (PACKAGE / part).rglob("*.py"))
    assert paths and recipe_parameters(paths) == []


def test_the_recipe_parameter_check_sees_one(tmp_path: Path) -> None:
    sample = tmp_path / "probe.py"
    sample.write_text("def f(recipe, x):\n    pass\ndef g(r: 'Recipe'):\n    pass\n"
                      "def h(plan: Plan):\n    pass\n", encoding="utf-8")
    assert recipe_parameters([sample]) == ["probe.py:1 f(recipe)", "probe.py:3 g(r)"]
