"""A weight variant's combinations derived from its vectors (issue 31), on synthetic
vectors: each combination's run and per-query values are written under its name, the
widths and precisions are what it says, index bytes are counted as documented, and an
index option goes through the index kinds' registry."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from evalq.core.errors import InputError
from evalq.data.trec import read_run
from evalq.encode.matryoshka import truncate
from evalq.execute.dataset_scoring import ReferenceState, run_index
from evalq.execute.search import refuse_short_split, search_weight
from evalq.measure.judged import JudgedIndex
from evalq.plan.gates import GateConfig, StatsOptions
from evalq.plan.run import ReportOptions, RunSections
from evalq.plan.search import SearchSection, search_plan
from evalq.results.folder import RunFolder
from evalq.retrieve.exact import ExactOptions
from evalq.retrieve.kinds import Documents, Queries
from support.hand_search import hand_ranking

N_DOCS, N_QUERIES, DIM = 120, 40, 32


def _data() -> tuple[SimpleNamespace, np.ndarray, np.ndarray, JudgedIndex]:
    rng = np.random.default_rng(3)
    docs = rng.standard_normal((N_DOCS, DIM)).astype(np.float32)
    docs /= np.linalg.norm(docs, axis=1, keepdims=True)
    queries = docs[:N_QUERIES] + 0.3 * rng.standard_normal((N_QUERIES, DIM)).astype(np.float32)
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    doc_ids = tuple(f"d{i}" for i in range(N_DOCS))
    query_ids = tuple(f"q{i}" for i in range(N_QUERIES))
    ds = SimpleNamespace(name="syn", corpus=SimpleNamespace(ids=doc_ids),
                         queries=SimpleNamespace(ids=query_ids))
    judged = JudgedIndex.build({q: {f"d{i}": 1} for i, q in enumerate(query_ids)}, doc_ids)
    return ds, docs, queries.astype(np.float32), judged


SECTIONS = RunSections(recipe="t", reference="fp32", metrics=("nDCG@10",),
                       reference_metrics=("overlap@10",),
                       gates=(GateConfig(metric="nDCG@10", max_drop=0.05),),
                       stats=StatsOptions(), report=ReportOptions(), title_separator=" ")


def _run(tmp_path: Path, section: dict) -> tuple[RunFolder, dict, SimpleNamespace]:
    ds, docs, queries, judged = _data()
    plan = search_plan(SearchSection.model_validate(section), 0.95, 1)
    folder = RunFolder(tmp_path / "run")
    folder.prepare()
    ref = run_index(ExactOptions(), Documents(ds.corpus.ids, docs),
                    Queries(ds.queries.ids, queries), 100, where="ref").ranking
    entry = search_weight(plan, SECTIONS, "fp32", ds, docs, queries, 100, folder,
                          ReferenceState(ref, queries, docs), judged)
    return folder, entry, ds


def test_every_combination_is_written_with_its_cost(tmp_path: Path) -> None:
    folder, entry, ds = _run(tmp_path, {
        "weights": ["fp32"], "dims": [32, 16],
        "vectors": [{"quantize": "none"}, {"quantize": "int8", "rescore": 4},
                    {"quantize": "binary"}]})
    combos = entry["combinations"]
    assert set(combos) == {f"s.fp32.{v}.{d}" for v in ("none", "int8+rescore4", "binary")
                           for d in (32, 16)}
    assert combos["s.fp32.none.32"]["index_bytes"] == N_DOCS * 4 * 32
    assert combos["s.fp32.int8+rescore4.16"]["index_bytes"] == N_DOCS * 16 + 2 * 4 * 16
    assert combos["s.fp32.binary.16"]["index_bytes"] == N_DOCS * 2
    for name in combos:
        values = folder.read_per_query("syn", name)
        assert values.query_ids == ds.queries.ids
        assert set(values.values) == {"nDCG@10", "overlap@10"}
        run = read_run(folder.root / "runs" / "syn" / f"{name}.trec")
        assert set(run) == set(ds.queries.ids)
    # full width and float: the reference's own search, so it agrees with itself
    same = folder.read_per_query("syn", "s.fp32.none.32")
    assert np.all(same.values["overlap@10"] == 1.0)
    narrow = folder.read_per_query("syn", "s.fp32.none.16")
    assert np.mean(narrow.values["overlap@10"]) < 1.0  # half the width reorders results


def test_an_index_option_goes_through_the_registry(tmp_path: Path) -> None:
    _, entry, _ = _run(tmp_path, {"weights": ["fp32"], "vectors": [{"quantize": "none"}],
                                  "index": [{"kind": "exact"},
                                            {"kind": "faiss", "factory": "HNSW16"}]})
    combos = entry["combinations"]
    assert set(combos) == {"s.fp32.none.full", "s.fp32.none.full.faiss-HNSW16"}
    assert combos["s.fp32.none.full.faiss-HNSW16"]["index"] == "faiss-HNSW16"
    assert combos["s.fp32.none.full"]["dims"] == DIM
    assert combos["s.fp32.none.full"]["recall_at_10"] == 1.0  # exact against itself
    assert 0.0 < combos["s.fp32.none.full.faiss-HNSW16"]["recall_at_10"] <= 1.0


def test_recall_is_against_the_exact_float_search_of_the_same_width(tmp_path: Path) -> None:
    """No exact float combination at 16 dims in the grid: the exact search is run once
    for the recall, which is the hand-computed top-10 overlap with numpy's ranking."""
    folder, entry, ds = _run(tmp_path, {"weights": ["fp32"], "dims": [16],
                                        "vectors": [{"quantize": "binary"}]})
    _, docs, queries, _ = _data()
    hand = hand_ranking(truncate(queries, 16), truncate(docs, 16), list(ds.queries.ids),
                        list(ds.corpus.ids), 10)
    run = read_run(folder.root / "runs" / "syn" / "s.fp32.binary.16.trec")
    expected = np.mean([len(set(list(run[q])[:10]) & set(hand[q])) / 10 for q in hand])
    recall = entry["combinations"]["s.fp32.binary.16"]["recall_at_10"]
    assert recall == pytest.approx(expected, abs=1e-9) and recall < 1.0  # sign bits lose


def _recall_from_files(folder: RunFolder, name: str, exact: str) -> float:
    """Top-10 overlap of run ``name`` with run ``exact``, read from the written files."""
    runs = [read_run(folder.root / "runs" / "syn" / f"{n}.trec") for n in (name, exact)]
    return float(np.mean([len(set(list(runs[0][q])[:10]) & set(list(runs[1][q])[:10]))
                          / 10 for q in runs[1]]))


@pytest.mark.server
def test_pgvector_options_on_the_grid(tmp_path: Path) -> None:
    """A database kind on the index axis (an embedded PostgreSQL + pgvector): a Seq Scan
    and a small HNSW, each named by its settings, costed by what the table holds and
    measured against exact search."""
    pg = {"kind": "pgvector", "allow_root": True}
    folder, entry, _ = _run(tmp_path, {"weights": ["fp32"], "index": [
        {"kind": "exact"}, {**pg, "index": "none"},
        {**pg, "m": 4, "ef_construction": 8, "ef_search": 4}]})
    combos = entry["combinations"]
    scan, hnsw = ("s.fp32.none.full.pgvector-indexnone",
                  "s.fp32.none.full.pgvector-m4-ef_construction8-ef_search4")
    assert set(combos) == {"s.fp32.none.full", scan, hnsw}
    assert combos[scan]["recall_at_10"] == 1.0
    assert combos[hnsw]["recall_at_10"] == pytest.approx(
        _recall_from_files(folder, hnsw, "s.fp32.none.full"), abs=1e-9)
    assert combos[hnsw]["index_bytes"] > combos[scan]["index_bytes"] > 0  # the graph


def test_widths_past_the_vectors_and_short_splits_are_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="exceed the model's width 32"):
        _run(tmp_path, {"weights": ["fp32"], "dims": [64]})
    plan = search_plan(SearchSection.model_validate({"weights": ["fp32"]}), 0.95, 1)
    with pytest.raises(InputError) as err:
        refuse_short_split(plan, 15, "syn")
    assert "dataset syn" in err.value.message and err.value.field == "search.split.explore"
    refuse_short_split(plan, 20, "syn")  # 10 to confirm: enough
