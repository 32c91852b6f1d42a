"""Backends are declared once (``backends/spec.py``, ``backends/registry.py``): every list
of backend names (the recipe's allowed values, ``evalq init --backend``, the plan, Ray,
load test, HTTP probe) is derived from the registry, and a name cannot be registered
twice (the measure registry's duplicates: tests/measure/test_metrics_registry.py)."""

from __future__ import annotations

import subprocess
import sys
import typing
from pathlib import Path

import pytest

from evalq.app import scaffold
from evalq.app.cli import main
from evalq.core.errors import InputError
from evalq.engines.options import HttpOptions
from evalq.engines.quantize import METHODS
from evalq.engines.registry import BACKENDS, embedding_backend, register_backend
from evalq.engines.spec import BackendSpec
from evalq.execute.load.sweep import Api
from evalq.plan.pipelines import RerankerVariant
from evalq.recipe.schema import Variant, recipe_from_located
from evalq.recipe.yamlsource import Located


def _fake(name: str = "fake-engine", **kw: typing.Any) -> BackendSpec:
    return BackendSpec(name, "embedding", "in-process", lambda variant, ctx: None,
                       quantized_by="evalq", **kw)


def _recipe(backend: str) -> dict[str, typing.Any]:
    return {"name": "r", "model": {"path": "m"}, "datasets": ["pydocs"],
            "reference": {"name": "fp32"},
            "candidates": [{"name": "c", "backend": backend}]}


def test_a_registered_backend_is_allowed_by_the_recipe_and_offered_by_init(
        capsys: pytest.CaptureFixture[str]) -> None:
    names = [repr(n) for n in BACKENDS.names("embedding")]
    allowed = f"Input should be {', '.join(names[:-1])} or {names[-1]}"
    with pytest.raises(InputError, match=allowed) as before:
        recipe_from_located(Located(_recipe("fake-engine")), Path("r.yaml"))
    assert before.value.field == "candidates.0.backend"
    with BACKENDS.added(_fake()):
        recipe = recipe_from_located(Located(_recipe("fake-engine")), Path("r.yaml"))
        assert recipe.candidates[0].backend == "fake-engine"
        assert "fake-engine" in scaffold.backend_names()
        assert "fake-engine" in Variant.model_json_schema()["properties"]["backend"]["enum"]
        with pytest.raises(ValueError, match=f"{names[-1]} or 'fake-engine'"):
            Variant.model_validate({"name": "x", "backend": "nope"})
        with pytest.raises(SystemExit) as exit_info:
            main(["init", "--backend", "nope"])
        assert exit_info.value.code == 2
        assert f"{names[-1]}, 'fake-engine')" in capsys.readouterr().err
    # gone again: the names are read when asked, not copied at import
    assert "fake-engine" not in scaffold.backend_names()
    with pytest.raises(SystemExit):
        main(["init", "--backend", "fake-engine"])
    assert "invalid choice: 'fake-engine'" in capsys.readouterr().err


def test_a_second_registration_of_a_name_or_alias_is_refused() -> None:
    with pytest.raises(ValueError, match="embedding backend 'inprocess' is already registered"):
        register_backend(_fake("inprocess"))
    with pytest.raises(ValueError, match="'vllm-engine' is already registered"):
        register_backend(_fake("another", aliases=("vllm-engine",)))
    with BACKENDS.added(_fake()), pytest.raises(ValueError, match="already registered"):
        register_backend(_fake())
    assert "fake-engine" not in BACKENDS.names("embedding")
    # the same name may serve both kinds: tei embeds and reranks
    assert BACKENDS.get("reranker", "tei") is not BACKENDS.get("embedding", "tei")


def test_backend_options_follow_the_specs() -> None:
    """The messages a Literal and the old if/elif gave, now derived from the specs."""
    with pytest.raises(ValueError, match="'http' options apply to backends openai and tei "
                       "only"):
        Variant(name="x", http={"url": "http://127.0.0.1:1"})
    with pytest.raises(ValueError, match="'vllm' options apply to backend vllm only"):
        Variant(name="x", backend="tei", http={"url": "http://h"}, vllm={})
    with pytest.raises(ValueError, match=r"backend 'openai' needs 'http: \{url: \.\.\.\}'"):
        Variant(name="x", backend="openai")
    with pytest.raises(ValueError, match="'http' options apply to backends tei and "
                       "rerank-api only"):
        RerankerVariant(name="x", backend="vllm", http={"url": "http://h"})
    with pytest.raises(ValueError, match="Input should be 'inprocess', 'vllm', 'tei', "
                       "'rerank-api', 'onnx' or 'openvino'"):
        RerankerVariant(name="x", backend="openai")
    fake_http = _fake("fake-http", options_key="http", options_model=HttpOptions,
                      options_required=True)
    with BACKENDS.added(fake_http), pytest.raises(ValueError, match="backends openai, tei "
                                                  "and fake-http only"):
        Variant(name="x", http={"url": "http://127.0.0.1:1"})


def test_every_spec_is_consistent_with_the_recipe_and_the_load_sweep() -> None:
    schemas = {"embedding": Variant, "reranker": RerankerVariant}
    for kind, model in schemas.items():
        for spec in BACKENDS.specs(kind):
            if spec.options_key is not None:
                field = model.model_fields[spec.options_key]
                assert spec.options_model in typing.get_args(field.annotation), spec.name
            if spec.load_api is not None:
                assert spec.load_api in typing.get_args(Api), spec.name
            assert spec.local == bool(spec.devices), spec.name
    assert [s.name for s in BACKENDS.specs("embedding") if s.ray] == ["inprocess", "openai",
                                                                     "tei"]
    assert embedding_backend("vllm-server").name == "vllm"
    # quantization methods name the backends that apply them: registered ones, which
    # apply evalq's methods (or, for vLLM, load the checkpoints evalq makes)
    for method in METHODS.values():
        for name in method.backends:
            spec = embedding_backend(name)
            assert spec.quantized_by in ("evalq", "engine"), (method.name, name)


def test_the_registry_imports_no_torch_or_vllm() -> None:
    code = ("import sys\nfrom evalq.engines.registry import BACKENDS\nimport evalq.recipe.schema\n"
            "print([m for m in ('torch', 'vllm', 'transformers') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"
