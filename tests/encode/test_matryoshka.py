"""Matryoshka dimensions (``vectors: {dims: N}``): truncate, then renormalize, for any
embedding variant, combined with int8 / binary output quantization; refused at plan time
outside the model's width; a dims × int8 grid on the quickstart slice with index bytes and
Δ in the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalq.app.api import run_recipe_file
from evalq.app.cli import main
from evalq.data.manifest import load_datasets
from evalq.data.trec import read_run
from evalq.encode.matryoshka import common_dims, truncate
from support import recipes


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


# -- the arithmetic, and the classic mistake: normalizing before truncation -----------------


def test_truncate_then_renormalize_not_the_other_way_round() -> None:
    rng = np.random.default_rng(0)
    raw = rng.normal(size=(50, 64)).astype(np.float32) * rng.uniform(0.1, 10, size=(50, 1))
    raw[:, :16] *= rng.uniform(0.2, 3, size=(50, 1)).astype(np.float32)  # uneven prefixes
    full = _unit(raw)  # what an engine returns (normalize: true)
    got = truncate(full, 16)
    right = _unit(raw[:, :16])  # the oracle: the raw pooled prefix, normalized
    mistake = full[:, :16]  # normalized first, truncated after, never renormalized
    np.testing.assert_allclose(got, right, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    assert np.abs(np.linalg.norm(mistake, axis=1) - 1).max() > 0.1
    # the mistake changes rankings, not only scores: inner products by a varying norm
    queries = truncate(_unit(rng.normal(size=(20, 64)).astype(np.float32)), 16)
    top_right = np.argsort(-(queries @ right.T), axis=1)[:, :5]
    top_wrong = np.argsort(-(queries @ mistake.T), axis=1)[:, :5]
    assert (top_right != top_wrong).any()


def test_truncate_is_idempotent_and_refuses_bad_widths() -> None:
    x = truncate(np.eye(4, 8, dtype=np.float32) + 0.5, 6)
    np.testing.assert_array_equal(truncate(x, 6), x)  # a server's truncated vectors pass
    for bad in (0, 9):
        with pytest.raises(ValueError):
            truncate(np.ones((2, 8), dtype=np.float32), bad)
    a, b = common_dims(np.ones((3, 8), dtype=np.float32), np.ones((3, 4), dtype=np.float32))
    assert a.shape == b.shape == (3, 4)


# -- plan-time refusals (nothing loads) ---------------------------------------------------


def _plan_recipe(tmp_path: Path, candidate: dict[str, Any]) -> Path:
    return recipes.write(tmp_path / "m.yaml", recipes.recipe(
        "mat", cache=tmp_path / "cache", queries=10, docs=20, candidates=[candidate]))


@pytest.mark.parametrize("candidate, needle", [
    ({"name": "d0", "vectors": {"dims": 0}}, "candidates.0.vectors.dims"),
    ({"name": "d-1", "vectors": {"dims": -4}}, "candidates.0.vectors.dims"),
    ({"name": "wide", "vectors": {"dims": 385}}, "exceeds the model's 384 dimensions"),
    ({"name": "both", "backend": "openai", "vectors": {"dims": 64},
      "http": {"url": "http://127.0.0.1:9", "dimensions": 128}}, "disagree"),
], ids=["zero", "negative", "wider-than-model", "http-conflict"])
def test_bad_dims_exit_2_at_plan_time(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      candidate: dict[str, Any], needle: str) -> None:
    recipe = _plan_recipe(tmp_path, candidate)
    assert main(["plan", str(recipe)]) == 2
    err = capsys.readouterr().err
    assert needle in err and str(recipe) in err
    assert not (tmp_path / "cache").exists()


def test_plan_prints_dims_with_the_quantization(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    recipe = _plan_recipe(tmp_path, {"name": "d128-int8",
                                     "vectors": {"dims": 128, "quantize": "int8"}})
    assert main(["plan", str(recipe)]) == 0
    assert "index vectors int8, 128 Matryoshka dims" in capsys.readouterr().out


# -- a dims × int8 grid on the quickstart slice -------------------------------------------

GRID = [{"name": "d256", "vectors": {"dims": 256}},
        {"name": "d128", "vectors": {"dims": 128}},
        {"name": "d64", "vectors": {"dims": 64}},
        {"name": "int8", "vectors": {"quantize": "int8"}},
        {"name": "d128-int8", "vectors": {"dims": 128, "quantize": "int8"}},
        {"name": "d64-int8", "vectors": {"dims": 64, "quantize": "int8"}},
        {"name": "d64-binary", "vectors": {"dims": 64, "quantize": "binary", "rescore": 4}}]


@pytest.fixture(scope="module")
def grid(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("matryoshka")
    # A pydocs slice of 150 queries and 300 documents (the quickstart's earlier slice).
    recipe = recipes.write(base / "grid.yaml", recipes.recipe(
        "matryoshka-grid", cache=base / "cache", queries=150, docs=300, candidates=GRID,
        metrics=["nDCG@10", "R@100"], reference_metrics=["overlap@10", "cosine"],
        gates=[recipes.gate("overlap@10", "reference", min=0.5)], resamples=1000,
        report={"cost": "index_bytes"}))
    outcome = run_recipe_file(recipe, output=base / "out", progress=False)
    return {"outcome": outcome, "out": base / "out", "recipe": recipe}


def _index(grid: dict[str, Any], name: str) -> dict[str, Any]:
    manifest = json.loads((grid["out"] / "manifest.json").read_text())
    return manifest["variants"][name]["datasets"]["pydocs"]["index"]


@pytest.mark.slow
@pytest.mark.model
def test_grid_index_bytes_follow_dims_and_quantization(grid: dict[str, Any]) -> None:
    docs = 300
    expected = {"fp32": 384 * 4, "d256": 256 * 4, "d128": 128 * 4, "d64": 64 * 4,
                "int8": 384, "d128-int8": 128, "d64-int8": 64, "d64-binary": 64 // 8}
    for name, per_vector in expected.items():
        index = _index(grid, name)
        assert index["bytes"] == docs * per_vector, (name, index)
        assert index["dim"] == per_vector // {"int8": 1, "binary": 1 / 8}.get(
            index["quantize"], 4)
    assert _index(grid, "d64-int8")["matryoshka"] == {"dims": 64, "model_dim": 384}
    assert "matryoshka" not in _index(grid, "int8")


def _top10(scores: np.ndarray, doc_ids: list[str]) -> list[set[str]]:
    return [{doc_ids[j] for j in np.argsort(-row, kind="stable")[:10]} for row in scores]


@pytest.mark.slow
@pytest.mark.model
def test_grid_search_uses_truncated_renormalized_vectors(grid: dict[str, Any],
                                                         minilm_path: Path) -> None:
    """The d64 run against an independent search: sentence-transformers' raw pooled
    vectors (no normalization), their first 64 coordinates normalized, numpy top-10. The
    run must agree with that and not with the mistake (normalize, then truncate)."""
    from sentence_transformers import SentenceTransformer

    [ds] = load_datasets([recipes.PYDOCS], grid["recipe"], 150, 300)
    model = SentenceTransformer(str(minilm_path), device="cpu")
    raw_docs = model.encode(ds.corpus.texts_for_encoding(" "), normalize_embeddings=False,
                            batch_size=64)
    raw_queries = model.encode(list(ds.queries.texts), normalize_embeddings=False)
    doc_ids, query_ids = list(ds.corpus.ids), list(ds.queries.ids)
    right = _top10(_unit(raw_queries[:, :64]) @ _unit(raw_docs[:, :64]).T, doc_ids)
    mistake = _top10(_unit(raw_queries[:, :64]) @ _unit(raw_docs)[:, :64].T, doc_ids)
    run = read_run(grid["out"] / "runs" / "pydocs" / "d64.trec")
    got = [set(sorted(run[q], key=lambda d: -run[q][d])[:10]) for q in query_ids]
    agree_right = np.mean([len(a & b) / 10 for a, b in zip(got, right)])
    agree_mistake = np.mean([len(a & b) / 10 for a, b in zip(got, mistake)])
    assert agree_right >= 0.99, agree_right
    assert agree_mistake < agree_right, (agree_mistake, agree_right)


@pytest.mark.slow
@pytest.mark.model
def test_grid_report_shows_index_layout_and_delta(grid: dict[str, Any],
                                                  tmp_path: Path) -> None:
    """The decision table (the job summary's candidate table, and the HTML metrics table)
    reads as dims × quantization, with index bytes and Δ per candidate."""
    summary = tmp_path / "summary.md"
    assert main(["gate", str(grid["out"]), "--markdown", str(summary)]) in (0, 1)
    text = summary.read_text()
    for name, layout in (("d64-int8", "64d int8"), ("d128", "128d float32"),
                         ("d64-binary", "64d binary"), ("int8", "384d int8")):
        row = next(line for line in text.splitlines() if line.startswith(f"| {name} |"))
        assert layout in row and "KiB" in row, row
        assert "[" in row.split("|")[3], row  # the Δ cell with its interval
    page = tmp_path / "report.html"
    assert main(["report", str(grid["out"]), "-o", str(page)]) == 0
    html = page.read_text()
    assert "18.8 KiB (64d int8)" in html and "75.0 KiB (64d float32)" in html


# -- served variants send `dimensions`; a server's refusal is exit 2 with its answer -------


@pytest.fixture(scope="module")
def st_minilm(minilm_path: Path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_path), device="cpu")


def _served_recipe(tmp_path: Path, url: str) -> Path:
    return recipes.write(tmp_path / "served.yaml", recipes.recipe(
        "served-dims", cache=tmp_path / "cache", queries=20, docs=60,
        candidates=[{"name": "d64", "vectors": {"dims": 64}},
                    {"name": "served-d64", "backend": "openai", "vectors": {"dims": 64},
                     "http": {"url": url, "model": "minilm", "retries": 0}}],
        metrics=["nDCG@10"], reference_metrics=["overlap@10", "cosine"], resamples=200))


@pytest.mark.model
@pytest.mark.server
def test_served_variant_sends_dimensions_and_matches_client_truncation(
        tmp_path: Path, st_minilm) -> None:
    from support.fake_embedding_server import FakeState, fake_server

    with fake_server(FakeState(st_minilm)) as server:
        outcome = run_recipe_file(_served_recipe(tmp_path, server.url), output=tmp_path / "o",
                                  progress=False)
        sent = {r.payload.get("dimensions") for r in server.state.requests
                if r.path == "/v1/embeddings"}
    assert 64 in sent
    local = read_run(tmp_path / "o" / "runs" / "pydocs" / "d64.trec")
    served = read_run(tmp_path / "o" / "runs" / "pydocs" / "served-d64.trec")
    for qid, docs in local.items():
        top = sorted(docs, key=lambda d: -docs[d])[:5]
        assert top == sorted(served[qid], key=lambda d: -served[qid][d])[:5]
    assert outcome.summary is not None


@pytest.mark.model
@pytest.mark.server
def test_a_server_refusing_dimensions_exits_2_with_its_answer(
        tmp_path: Path, st_minilm, capsys: pytest.CaptureFixture[str]) -> None:
    from support.fake_embedding_server import FakeState, fake_server

    with fake_server(FakeState(st_minilm, matryoshka=False)) as server:
        code = main(["run", str(_served_recipe(tmp_path, server.url)),
                     "--output", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "does not support Matryoshka" in err and "HTTP 400" in err


def test_parity_compares_a_matryoshka_variant_at_its_width() -> None:
    """A served variant that sent `dimensions` returns narrower vectors than the reference:
    parity judges it against the reference truncated the same way, not as a shape error."""
    from evalq.core.values import EncodingSettings
    from evalq.encode.parity import compare_vectors

    rng = np.random.default_rng(1)
    full = _unit(rng.normal(size=(8, 32)).astype(np.float32))
    settings = EncodingSettings()
    result = compare_vectors("d16", settings, truncate(full, 16), settings, full)
    assert result.passed and result.dim == 16 and result.min_cosine > 0.999999
    wrong = compare_vectors("d16", settings, full[:, :16][:, ::-1].copy(), settings, full)
    assert not wrong.passed
