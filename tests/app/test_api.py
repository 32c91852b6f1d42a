"""The Python API: evalq.run / evalq.load_results / Results, on the tiny BEIR folder."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import evalq
from evalq.core.errors import InputError
from support import recipes

TINY = Path(__file__).resolve().parents[1] / "data" / "beir-tiny"
RECIPE = recipes.recipe(
    "api", datasets=[{"name": "tiny", "source": "beir", "path": str(TINY)}],
    candidates=[{"name": "int8-vectors", "vectors": {"quantize": "int8"}},
                {"name": "binary-vectors", "vectors": {"quantize": "binary"}}],
    gates=[recipes.gate("overlap@10", "reference", min=0.5)])


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> evalq.Results:
    out = tmp_path_factory.mktemp("api") / "out"
    return evalq.run(RECIPE, output=out, progress=False,
                     cache_dir=str(out.parent / "cache"), parity={"texts": 4})


@pytest.mark.slow
@pytest.mark.model
def test_results_table_matches_the_summary(results: evalq.Results) -> None:
    table = results.to_pandas()
    # One row per dataset x variant x metric: 3 qrels measures each, 4 reference measures
    # for each of the two candidates.
    assert len(table) == 3 * 3 + 2 * 4
    row = table.set_index(["variant", "metric"]).loc[("int8-vectors", "nDCG@10")]
    stored = results.summary["datasets"]["tiny"]["variants"]["int8-vectors"]["metrics"]["nDCG@10"]
    assert row["value"] == stored["value"] and row["delta"] == stored["vs_reference"]["delta"]
    verdicts = table.set_index(["variant", "metric"])["verdict"]
    assert verdicts[("binary-vectors", "overlap@10")] in ("pass", "fail")
    assert verdicts.isna()[("int8-vectors", "RBO@100")]  # no gate reads it
    assert set(results.verdicts) == {"int8-vectors", "binary-vectors"}
    assert results.passed == all(v.passed for v in results.verdicts.values())


@pytest.mark.slow
@pytest.mark.model
def test_per_query_frames_and_run_files(results: evalq.Results) -> None:
    frame = results.per_query("tiny", "int8-vectors")
    assert list(frame["query_id"]) == sorted(frame["query_id"]) and len(frame) == 4
    stored = results.summary["datasets"]["tiny"]["variants"]["int8-vectors"]["metrics"]
    assert frame["nDCG@10"].mean() == pytest.approx(stored["nDCG@10"]["value"])
    assert len(results.per_query()) == 3 * 4
    run_file = results.run_files[("tiny", "fp32")]
    assert run_file.read_text().split()[:2] == [frame["query_id"][0], "Q0"]


@pytest.mark.slow
@pytest.mark.model
def test_load_results_reads_the_same_folder(results: evalq.Results) -> None:
    again = evalq.load_results(results.folder)
    assert again.summary == results.summary and again.to_pandas().equals(results.to_pandas())


def test_bad_overrides_and_folders_are_input_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="unknown key 'candidatez'"):
        evalq.run(RECIPE, candidatez=[])
    with pytest.raises(InputError, match=r"no summary\.json here"):
        evalq.load_results(tmp_path)


@pytest.mark.process
def test_import_evalq_stays_light() -> None:
    """``import evalq`` (which every ``import evalq.<part>`` runs first) loads nothing; the
    API loads on first use of ``evalq.run`` and still never imports torch."""
    code = ("import evalq, sys; heavy = ('torch', 'pydantic', 'numpy', 'pandas'); "
            "print(sorted(m for m in heavy if m in sys.modules)); "
            "evalq.run; print('torch' in sys.modules, evalq.run.__module__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.split("\n")[:2] == ["[]", "False evalq.app.api"]
