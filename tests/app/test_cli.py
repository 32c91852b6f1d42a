"""The command line: fast help, trec_eval-compatible `evalq metrics`, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from evalq.app.cli import main


@pytest.mark.process
def test_help_imports_no_heavy_library() -> None:
    code = ("import sys\nfrom evalq.app.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "heavy = [m for m in ('torch', 'vllm', 'faiss', 'transformers', 'bitsandbytes')"
            " if m in sys.modules]\nprint(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_no_command_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2


def test_unknown_argument_is_exit_2() -> None:
    with pytest.raises(SystemExit) as info:
        main(["run", "x.yaml", "--frobnicate"])
    assert info.value.code == 2


def test_metrics_command_agrees_with_pytrec_eval(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import pytrec_eval

    rng = np.random.default_rng(3)
    qrels = {f"q{q}": {f"d{d}": int(rng.integers(0, 3)) for d in rng.choice(50, 8, False)}
             for q in range(30)}
    run = {f"q{q}": {f"d{d}": float(rng.choice([0.1, 0.5, 0.9, rng.random()]))
                     for d in rng.choice(50, 20, False)} for q in range(30)}
    (tmp_path / "qrels").write_text("".join(f"{q} 0 {d} {r}\n" for q, ds in qrels.items()
                                            for d, r in ds.items()))
    (tmp_path / "run").write_text("".join(f"{q} Q0 {d} 1 {s!r} t\n" for q, ds in run.items()
                                          for d, s in ds.items()))
    code = main(["metrics", str(tmp_path / "qrels"), str(tmp_path / "run"), "-m", "nDCG@10",
                 "-m", "AP@100", "-m", "P@10", "--json"])
    assert code == 0
    ours = json.loads(capsys.readouterr().out)
    oracle = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "map_cut.100", "P.10"})
    scores = oracle.evaluate(run)
    text = json.dumps(ours)
    for name, key in (("nDCG@10", "ndcg_cut_10"), ("AP@100", "map_cut_100"), ("P@10", "P_10")):
        expected = np.mean([scores[q][key] for q in qrels])
        assert name in text
        got = _find(ours, name)
        assert abs(got - expected) < 1e-9


def _find(obj: object, name: str) -> float:
    """The aggregate value for ``name`` wherever the JSON report keeps it."""
    if isinstance(obj, dict):
        if name in obj and isinstance(obj[name], int | float):
            return float(obj[name])
        if name in obj and isinstance(obj[name], dict) and "all" in obj[name]:
            return float(obj[name]["all"])
        for value in obj.values():
            try:
                return _find(value, name)
            except KeyError:
                continue
    raise KeyError(name)


def test_metrics_command_bad_run_file_is_exit_2(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "qrels").write_text("q1 0 d1 1\n")
    (tmp_path / "run").write_text("q1 Q0 d1 one 0.5 t\n")
    assert main(["metrics", str(tmp_path / "qrels"), str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "run:1" in err and "Traceback" not in err


def test_datasets_command_lists_pydocs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["datasets"]) == 0
    assert "pydocs" in capsys.readouterr().out


def test_a_command_name_registered_twice_is_refused() -> None:
    from evalq.app.cli import register_command

    with pytest.raises(ValueError, match="'run' is registered twice"):
        register_command("run", "a second run", lambda parser: None)(lambda args: 0)
