"""Fault class "bad recipe / bad flags": every problem is found by the plan stage, before
any model loads, all at once, exit 2, naming file, line, field and fix; never exit 3."""

from __future__ import annotations

from pathlib import Path

import pytest
from faultkit import no_traceback, recipe_data, run_cli, write_recipe

from evalq.engines.capability import DeviceInfo
from evalq.recipe.plan import PlanError, build_plan
from evalq.recipe.schema import load_recipe
from support import recipes


@pytest.fixture(autouse=True)
def _no_model_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any of these cases loading a model would be a plan-stage miss: make it fail loudly."""
    import evalq.engines.factory as factory

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a model was built although the recipe is invalid")

    monkeypatch.setattr(factory, "create_encoder", refuse)


CASES = {
    "gate metric not computed": (
        dict(gates=[recipes.gate("RR@10", "qrels", max_drop="1%")]),
        ["gates.0.metric", "add RR@10 to metrics"]),
    "quantization on openai": (
        dict(candidates=[{"name": "remote", "backend": "openai",
                          "http": {"url": "http://127.0.0.1:9"},
                          "quantization": {"method": "bitsandbytes", "bits": 8}}]),
        ["candidates.0.quantization.method", "running server"]),
    "quantization on tei": (
        dict(candidates=[{"name": "remote", "backend": "tei",
                          "http": {"url": "http://127.0.0.1:9"},
                          "quantization": {"method": "torch-dynamic-int8"}}]),
        ["candidates.0.quantization.method", "running server"]),
    "bitsandbytes method on vllm": (
        dict(candidates=[{"name": "v", "backend": "vllm",
                          "quantization": {"method": "bitsandbytes", "bits": 8}}]),
        ["'v'", "not applied by backend vllm", "w8a8-int8"]),
    "w8a8 on inprocess": (
        dict(candidates=[{"name": "w", "quantization": {"method": "w8a8-int8"}}]),
        ["'w'", "w8a8-int8", "runs on backend vllm"]),
    "candidates empty with gates": (
        dict(candidates=[]), ["candidates", "pass vacuously"]),
}


def _recipe_text(tmp_path: Path, case: str) -> Path:
    kwargs, _ = CASES[case]
    return write_recipe(tmp_path, **kwargs)


@pytest.mark.parametrize("case", list(CASES))
def test_plan_refuses_before_loading(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     case: str) -> None:
    path = _recipe_text(tmp_path, case)
    for command in ("validate", "run", "plan"):
        result = run_cli(capsys, command, str(path))
        assert result.code == 2, (command, result.err)
        assert no_traceback(result.err)
        assert str(path) in result.err and "Fix:" in result.err
        for needle in CASES[case][1]:
            assert needle in result.err, (command, needle, result.err)
    assert not (tmp_path / "out").exists()  # nothing started


def test_every_problem_is_reported_at_once(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = write_recipe(
        tmp_path,
        candidates=[{"name": "remote", "backend": "openai", "http": {"url": "http://127.0.0.1:9"},
                     "quantization": {"method": "bitsandbytes", "bits": 8}},
                    {"name": "w", "quantization": {"method": "w8a8-int8"}},
                    {"name": "gpu", "device": "cuda"}],
        gates=[recipes.gate("RR@10", "qrels", max_drop="1%")])
    result = run_cli(capsys, "run", str(path))
    assert result.code == 2
    count = 3 + ("cuda" in result.err and "no CUDA GPU" in result.err)
    assert f"{count} problems" in result.err
    lines = [line for line in result.err.splitlines() if line.strip()[:2].rstrip(".").isdigit()]
    assert len(lines) == count
    assert all(f"{path}:" in line for line in lines)  # each with its recipe line


def test_one_problem_shared_by_every_variant_is_reported_once(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A bad ``model.path`` is every variant's problem; the plan says it once, naming the
    variants, instead of once per variant."""
    data = recipe_data(tmp_path, candidates=[{"name": "a", "dtype": "bfloat16"}, {"name": "b"}])
    data["model"] = {"path": str(tmp_path / "no-such-model")}
    path = recipes.write(tmp_path / "recipe.yaml", data)
    result = run_cli(capsys, "plan", str(path))
    assert result.code == 2 and no_traceback(result.err)
    assert "problems" not in result.err  # one problem, not three
    assert result.err.count("no-such-model") == 1
    assert "variants 'fp32', 'a', 'b': model" in result.err and "model.path" in result.err


def test_device_cuda_without_cuda_names_the_variant(tmp_path: Path) -> None:
    path = write_recipe(tmp_path, candidates=[{"name": "gpu-bf16", "device": "cuda"}])
    with pytest.raises(PlanError) as err:
        build_plan(load_recipe(path), path, detect=lambda: DeviceInfo("cpu"))
    text = str(err.value)
    assert "variant 'gpu-bf16' asks for device cuda" in text and "candidates.0.device" in text
    # validate without --here notes it (a GPU recipe validates on a laptop)
    plan = build_plan(load_recipe(path), path, detect=lambda: DeviceInfo("cpu"),
                      machine=False)
    assert any("gpu-bf16" in n for n in plan.machine_notes)


def test_a_cpu_engine_plans_on_the_cpu_whatever_gpu_is_here(tmp_path: Path) -> None:
    """ONNX Runtime and OpenVINO variants run on the CPU: on a GPU machine ``device: auto``
    plans them there (not on the GPU torch sees), ``device: cuda`` is refused as the
    recipe's problem on any machine, and a plan of CPU engines alone asks torch nothing
    (importing it is seconds of a warm ``evalq verify``)."""
    on_a_gpu = DeviceInfo("cuda", "a GPU", (9, 0))
    path = write_recipe(tmp_path, candidates=[{"name": "ov", "backend": "openvino"},
                                              {"name": "ort", "backend": "onnx"}])
    plan = build_plan(load_recipe(path), path, detect=lambda: on_a_gpu)
    assert [(v.name, v.device) for v in plan.variants] == [
        ("fp32", "cuda"), ("ov", "cpu"), ("ort", "cpu")]
    data = recipe_data(tmp_path, candidates=[{"name": "ort", "backend": "onnx"}])
    data["reference"] = {"name": "ov", "backend": "openvino"}
    cpu_only = recipes.write(tmp_path / "cpu-only.yaml", data)

    def never() -> DeviceInfo:
        raise AssertionError("a plan of CPU engines asked which GPU is here")

    plan = build_plan(load_recipe(cpu_only), cpu_only, detect=never)
    assert [v.device for v in plan.variants] == ["cpu", "cpu"]
    gpu = write_recipe(tmp_path, candidates=[{"name": "ov", "backend": "openvino",
                                              "device": "cuda"}])
    for machine in (on_a_gpu, DeviceInfo("cpu")):
        with pytest.raises(PlanError) as err:
            build_plan(load_recipe(gpu), gpu, detect=lambda m=machine: m)
        assert "backend openvino runs on the CPU only" in str(err.value)
        assert "candidates.0.device" in str(err.value)


@pytest.mark.parametrize(("text", "needles"), [
    ("max_queries: true\n", ["max_queries", "must be a number"]),
    ("stats: {resamples: 1000000000000}\n", ["resamples", "less than or equal"]),
    ("metrics: [nDCG@1000000000]\n", ["cutoff 1000000000", "metrics.0"]),
    ("name: again\n", ["'name' appears twice", "delete one"]),
    ("include: missing.yaml\n", ["included file 'missing.yaml'", "field 'include'"]),
])
def test_validation_details(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str,
                            needles: list[str]) -> None:
    data = recipe_data(tmp_path)
    if text.startswith(("stats", "metrics")):
        del data[text.split(":")[0]]  # the appended line gives it again
    path = tmp_path / "recipe.yaml"
    path.write_text(recipes.text(data) + "\n" + text)
    result = run_cli(capsys, "validate", str(path))
    assert result.code == 2 and no_traceback(result.err)
    for needle in needles:
        assert needle in result.err, result.err
    assert f"{path}:" in result.err  # with the line
    assert ".." not in result.err.replace(str(tmp_path), "")  # no doubled punctuation


def test_directory_as_recipe(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(capsys, "validate", str(tmp_path))
    assert result.code == 2 and "is a folder, not a recipe file" in result.err


@pytest.mark.parametrize("flag", ["--max-queries", "--max-docs"])
def test_flag_errors_name_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                   flag: str) -> None:
    path = write_recipe(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        run_cli(capsys, "run", str(path), flag, "0")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err and "at least 1" in err


def test_output_and_cache_paths_that_are_files(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    path = write_recipe(tmp_path)
    (tmp_path / "out").write_text("a file where the results folder should go")
    (tmp_path / "cache").write_text("a file where the cache folder should go")
    result = run_cli(capsys, "run", str(path))
    assert result.code == 2
    assert "2 problems" in result.err
    assert "'output'" in result.err and "'cache_dir'" in result.err
    assert "is a file, not a folder" in result.err


def test_unknown_only_names_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(capsys, "run", str(write_recipe(tmp_path)), "--only", "nope")
    assert result.code == 2 and "field '--only'" in result.err and "int8-vectors" in result.err


def test_plan_prints_the_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = run_cli(capsys, "plan", str(write_recipe(tmp_path)))
    assert result.code == 0
    assert "reference fp32: load" in result.out and "candidate int8-vectors" in result.out
    assert "gate: nDCG@10 vs qrels max_drop 50%" in result.out
    assert "cache: chunks keyed by weights fingerprint" in result.out


def _rescore_recipe(folder: Path, where: str, rescore: int) -> Path:
    """A binary candidate (``where="candidate"``) or a search grid's binary precision
    (``where="search"``) rescoring ``rescore`` × depth candidates."""
    if where == "candidate":
        return write_recipe(folder, candidates=[
            {"name": "binary", "vectors": {"quantize": "binary", "rescore": rescore}}])
    data = recipe_data(folder)
    data.update(max_queries=40, search={"weights": ["fp32"], "vectors": [
        {"quantize": "none"}, {"quantize": "binary", "rescore": rescore}]})
    return recipes.write(folder / "recipe.yaml", data)


@pytest.mark.parametrize(("where", "field"), [("candidate", "candidates.0.vectors.rescore"),
                                              ("search", "search.vectors.1.rescore")])
def test_a_rescore_past_any_use_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           where: str, field: str) -> None:
    """``vectors.rescore`` multiplies the depth: 10**12 validated and planned, and the run
    rescored the whole corpus without a word (the candidates are capped at its size). A
    multiplier past 1000 is a typo or a wish for float scoring of every document: refused
    naming the field, the bound and what to use instead; the bound itself plans."""
    path = _rescore_recipe(tmp_path, where, 10**12)
    for command in ("validate", "plan"):
        result = run_cli(capsys, command, str(path))
        assert result.code == 2, (command, result.err)
        assert no_traceback(result.err) and f"{path}:" in result.err
        assert f"field '{field}'" in result.err, result.err
        assert "at most 1000" in result.err and "Fix:" in result.err, result.err
        assert "queries: float" in result.err, result.err
    assert run_cli(capsys, "plan", str(_rescore_recipe(tmp_path, where, 1000))).code == 0
