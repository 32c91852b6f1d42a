"""Infinity's optimum engine serving evalq's own ONNX graph (``load.launch`` with
``onnx_from`` and ``{onnx_dir}``), against a real Infinity from ``.venv-infinity``.

The claims kept here: the served folder holds the very graph file the in-process ``onnx``
variant ran (same inode), and Infinity serving it gives the vectors sentence-transformers
gives (cosine > 0.99999 per text, texts past 256 tokens included: the folder's config
makes Infinity truncate where the recipe does); ``evalq run`` gates the served candidate
with its parity checked; bad input (a placeholder evalq does not fill, ``{onnx_dir}``
without ``onnx_from``, a source that is not an onnx variant, a graph file that does not
exist, Infinity without its optimum extra, an optimum server pointed at a folder with no
graph) is exit 2 naming the field and the fix.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

import evalq
from evalq.app.cli import main
from evalq.core.errors import InputError
from evalq.engines.launch import LaunchedServer, start_launch
from evalq.engines.onnx_serve import serving_folder
from evalq.execute.served_graph import served_graph
from evalq.recipe.plan import build_plan
from evalq.recipe.schema import load_recipe_source
from support import recipes

REPO = Path(__file__).resolve().parents[2]
SERVED = "minilm"
OPTIMUM = ["--served-model-name", SERVED, "--engine", "optimum", "--device", "cpu",
           "--onnx-disable-optimize", "--pooling-method", "mean", "--no-model-warmup",
           "--host", "{host}", "--port", "{port}", "--url-prefix", "/v1"]
ENV = {"OMP_NUM_THREADS": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0", "DO_NOT_TRACK": "1"}
QUERY = {"name": "query", "kind": "query", "slo_p99_ms": 2000, "open_loop": {"rates": [2]}}


def _infinity() -> str:
    venv = Path(os.environ.get("EVALQ_INFINITY_VENV", REPO / ".venv-infinity"))
    if not (venv / "bin" / "infinity_emb").is_file():
        pytest.fail(f"no Infinity server at {venv}/bin/infinity_emb: run `make infinity-venv` "
                    "(make test builds it), or set EVALQ_INFINITY_VENV to such a venv")
    return str(venv / "bin" / "infinity_emb")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _recipe(tmp: Path, launch: dict[str, Any], *, source: dict[str, Any] | None = None,
            port: int | None = None) -> dict[str, Any]:
    url = f"http://127.0.0.1:{port or _free_port()}"
    return recipes.recipe(
        "infinity-onnx", cache=tmp / "cache", output=tmp / "out", datasets=["pydocs"],
        queries=20, docs=40,
        candidates=[source or {"name": "ort-fp32", "backend": "onnx"},
                    {"name": "served", "backend": "openai",
                     "http": {"url": url, "model": SERVED, "max_batch": 32}}],
        gates=[recipes.gate("overlap@10", "reference", min=0.99)], parity={"texts": 8},
        load={"workloads": [QUERY], "parity": False, "warmup_s": 0.2, "duration_s": 0.5,
              "launch": {"served": launch}})


def _optimum_launch(**extra: Any) -> dict[str, Any]:
    return {"onnx_from": "ort-fp32", "cwd": "{onnx_dir}", "health": "/health",
            "command": [_infinity(), "v2", "--model-id", ".", *OPTIMUM],
            "env": dict(ENV), "startup_timeout_s": 300, **extra}


def _start(tmp: Path, data: dict[str, Any]) -> tuple[LaunchedServer, Any]:
    """Start the recipe's launched server the way `evalq run` does: graph, folder, server."""
    path = recipes.write(tmp / "recipe.yaml", data)
    loaded = load_recipe_source(path)
    plan = build_plan(loaded.recipe, path, use_cache=False, located=loaded.located)
    served = plan.variant("served")
    graph = served_graph(plan, served)
    server = start_launch(served.launch, served.options, served.model_folder(), tmp / "logs",
                          onnx_dir=graph.onnx_dir, served=graph.record)
    assert server is not None
    return server, graph


@pytest.fixture(scope="module")
def infinity_onnx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    tmp = tmp_path_factory.mktemp("infinity-onnx")
    server, graph = _start(tmp, _recipe(tmp, _optimum_launch()))
    try:
        yield server.url, graph
    finally:
        server.close()


@pytest.mark.model
@pytest.mark.process
@pytest.mark.server
@pytest.mark.slow
def test_infinity_optimum_serves_evalqs_graph_as_sentence_transformers_encodes(
        infinity_onnx: tuple[str, Any], minilm_path: Path, mixed_texts: list[str]) -> None:
    url, graph = infinity_onnx
    folder = graph.onnx_dir
    assert [p.name for p in folder.glob("**/*.onnx")] == ["model.onnx"]
    assert os.path.samefile(folder / "model.onnx", graph.record["served_graph"])
    assert json.loads((folder / "config.json").read_text())["max_position_embeddings"] == 256
    assert graph.record["onnx_from"] == "ort-fp32" and graph.record["quantization"] == "none"

    from sentence_transformers import SentenceTransformer

    oracle = SentenceTransformer(str(minilm_path), device="cpu").encode(
        mixed_texts, normalize_embeddings=True, batch_size=16)
    served = []
    for start in range(0, len(mixed_texts), 16):
        reply = httpx.post(f"{url}/v1/embeddings", timeout=120,
                           json={"model": SERVED, "input": mixed_texts[start:start + 16]})
        reply.raise_for_status()
        served += [row["embedding"] for row in reply.json()["data"]]
    vectors = np.asarray(served, dtype=np.float64)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    cosines = (vectors * oracle).sum(axis=1)
    assert cosines.min() > 0.99999, sorted(cosines)[:3]


@pytest.mark.model
@pytest.mark.process
@pytest.mark.server
@pytest.mark.slow
def test_evalq_run_gates_the_served_graph_with_parity_checked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)  # the datasets' manifests are found from the repo root
    results = evalq.run(_recipe(tmp_path, _optimum_launch()), progress=False)
    table = results.to_pandas().set_index(["variant", "metric"])
    assert table.loc[("served", "overlap@10"), "value"] == 1.0
    parity = results.manifest["variants"]["served"]["parity"]
    assert parity["checked"] is True and parity["passed"] is True
    assert parity["cosine_min"] > 0.99999
    record = results.manifest["variants"]["served"]["backend"]["served_graph"]
    assert record["onnx_from"] == "ort-fp32"
    assert record["served_graph"] == results.manifest["variants"]["ort-fp32"]["backend"]["graph"]
    assert results.passed


@pytest.mark.model
@pytest.mark.process
@pytest.mark.server
def test_infinity_without_its_optimum_extra_is_exit_2_naming_the_fix(tmp_path: Path) -> None:
    # A package named optimum without optimum.onnxruntime: what Infinity sees in a venv made
    # before `make infinity-venv` installed the optimum extra.
    shadow = tmp_path / "shadow" / "optimum"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("")
    launch = _optimum_launch(env={**ENV, "PYTHONPATH": str(shadow.parent)})
    with pytest.raises(InputError) as caught:
        _start(tmp_path, _recipe(tmp_path, launch))
    assert caught.value.field == "load.launch.served.command"
    assert "optimum extra" in caught.value.message
    assert caught.value.fix is not None and "make infinity-venv" in caught.value.fix


@pytest.mark.model
@pytest.mark.process
@pytest.mark.server
def test_an_optimum_server_pointed_at_a_folder_without_a_graph_names_onnx_from(
        tmp_path: Path) -> None:
    # The checkpoint folder itself: safetensors, no .onnx file.
    launch = {"command": [_infinity(), "v2", "--model-id", "{model_path}", *OPTIMUM],
              "env": dict(ENV), "startup_timeout_s": 300}
    with pytest.raises(InputError) as caught:
        _start(tmp_path, _recipe(tmp_path, launch))
    assert caught.value.field == "load.launch.served.command"
    assert "no usable ONNX file" in caught.value.message
    assert caught.value.fix is not None and "onnx_from" in caught.value.fix


@pytest.mark.model
def test_the_served_folder_is_rebuilt_for_another_truncation(
        tmp_path: Path, minilm_path: Path) -> None:
    from evalq.core.values import EncodingSettings
    from evalq.engines.quantize.onnx_graph import export_onnx

    graph = export_onnx(minilm_path, tmp_path / "checkpoints")
    first, record = serving_folder(graph, minilm_path, EncodingSettings(), tmp_path)
    left, _ = serving_folder(graph, minilm_path,
                             EncodingSettings(max_length=128, truncation_side="left"), tmp_path)
    assert first != left and os.path.samefile(first / "model.onnx", left / "model.onnx")
    assert record["rewritten"] == {"config.json": {"max_position_embeddings": [512, 256]}}
    assert json.loads((left / "tokenizer_config.json").read_text())["truncation_side"] == "left"
    assert serving_folder(graph, minilm_path, EncodingSettings(), tmp_path)[0] == first


# -- bad input: exit 2 at the recipe's field, before anything starts -----------------------


def _load_exit(tmp_path: Path, data: dict[str, Any], capsys: pytest.CaptureFixture[str],
               *needles: str) -> None:
    path = recipes.write(tmp_path / "recipe.yaml", data)
    assert main(["load", str(path), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, err


LAUNCH = {"command": ["infinity_emb", "v2", "--model-id", "{onnx_dir}", "--port", "{port}"]}


@pytest.mark.parametrize(("launch", "needles"), [
    ({**LAUNCH, "command": ["srv", "--model", "{model_dir}"]},
     ("{model_dir}", "{model_path}, {host}, {port}, {onnx_dir}")),
    (LAUNCH, ("{onnx_dir} without onnx_from", "onnx_from: ort-int8")),
    ({"command": ["srv", "--port", "{port"]}, ("literal brace",)),
    ({"command": ["srv"], "onnx_from": "ort-fp32"}, ("neither command nor cwd uses {onnx_dir}",)),
    ({**LAUNCH, "onnx_from": "ghost"}, ("onnx_from names unknown variant 'ghost'",)),
    ({**LAUNCH, "onnx_from": "fp32"},
     ("variant 'fp32' has backend 'inprocess'", "name a backend onnx variant")),
])
def test_launch_recipe_errors_name_the_field_and_the_fix(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        launch: dict[str, Any], needles: tuple[str, ...]) -> None:
    monkeypatch.chdir(REPO)
    _load_exit(tmp_path, _recipe(tmp_path, launch), capsys, *needles)


def test_a_served_graph_file_that_does_not_exist_is_exit_2_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    missing = tmp_path / "exported" / "model.onnx"
    source = {"name": "ort-fp32", "backend": "onnx", "onnx": {"file": str(missing)}}
    data = _recipe(tmp_path, {**LAUNCH, "onnx_from": "ort-fp32"}, source=source)
    _load_exit(tmp_path, data, capsys, f"ONNX file '{missing}' does not exist", "onnx.file")


def test_every_launch_placeholder_is_documented() -> None:
    from evalq.engines.options import PLACEHOLDERS

    page = (REPO / "docs" / "load-testing.md").read_text(encoding="utf-8")
    assert [n for n in PLACEHOLDERS if "{" + n + "}" not in page] == []


def test_the_decision_table_names_each_format_beside_its_verdict_and_knees() -> None:
    from evalq.execute.load.formats import decision_lines, served_format

    launched = {"command": ["/x/.venv-infinity/bin/infinity_emb", "v2"]}
    graph = {"backend": "openai", "server": {"launched": {
        **launched, "served_graph": {"quantization": "ort-dynamic-int8"}}}}
    assert served_format(graph) == "onnx ort-dynamic-int8"
    graph["server"]["launched"]["served_graph"]["quantization"] = "none"
    assert served_format(graph) == "onnx fp32"
    assert served_format({"backend": "openai", "server": {"launched": launched}}) == \
        "openai (infinity_emb)"
    assert served_format({"backend": "vllm", "server": {"dtype": "float32"}}) == "vllm float32"
    row = {"variant": "infinity-onnx-int8", "format": "onnx ort-dynamic-int8",
           "quality": "pass", "replicas": 3, "feasible": True,
           "dollars_per_million_queries": 1.5,
           "knees": {"query": {"per_s": 16.0, "lower_bound": False},
                     "ingest": {"per_s": 8.25, "lower_bound": True}}}
    line = decision_lines([row])[-1].split()
    assert line == ["infinity-onnx-int8", "onnx", "ort-dynamic-int8", "pass", "16.0",
                    ">=8.2", "3", "1.50"]


def test_a_run_that_leaves_out_the_source_of_a_served_graph_names_the_fix(
        tmp_path: Path) -> None:
    path = recipes.write(tmp_path / "recipe.yaml",
                         _recipe(tmp_path, {**LAUNCH, "onnx_from": "ort-fp32"}))
    loaded = load_recipe_source(path)
    # `evalq run --only served` plans no ort-fp32
    plan = build_plan(loaded.recipe, path, use_cache=False, only=["served"],
                      located=loaded.located)
    with pytest.raises(InputError) as caught:
        served_graph(plan, plan.variant("served"))
    assert caught.value.field == "--only"
    assert caught.value.fix == "add it: --only ort-fp32 --only served"


def test_a_launch_cwd_that_does_not_exist_is_exit_2_naming_cwd(tmp_path: Path) -> None:
    server = LaunchedServer(["true"], url="http://127.0.0.1:9", health="/health",
                            log_path=tmp_path / "srv.log", startup_timeout_s=5,
                            cwd=tmp_path / "nope", field="load.launch.srv.command")
    with pytest.raises(InputError) as caught:
        server.start()
    assert caught.value.field == "load.launch.srv.cwd" and "does not exist" in caught.value.message
