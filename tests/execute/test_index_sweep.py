"""A search-time parameter swept over one built index, judged at each value (issue 30).

Fast tier, FAISS only: the recipe's refusals of a sweep (each exit 2 naming the field and
the fix), the index built once and searched at every value, the fixed-sequence test and
the cheapest-point rule, and a sweep's per-value gates decided by the one gate path from
the values stored in a results folder. The databases' sweeps are in
tests/retrieve/test_vdb_sweep.py.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import yaml

from evalq.app.cli import main
from evalq.core.dataset import Qrels
from evalq.core.errors import InputError
from evalq.core.gates import GateSpec
from evalq.core.values import PerQuery
from evalq.execute.dataset_scoring import run_index, write_loss_views
from evalq.execute.losses import loss_pairs
from evalq.execute.sweep import fixed_sequence, record_sweep, sweep_summary
from evalq.measure.judged import evaluate as evaluate_qrels
from evalq.measure.registry import parse_measures
from evalq.recipe.schema import load_recipe
from evalq.results.folder import RunFolder
from evalq.retrieve import ann
from evalq.retrieve.exact import ExactOptions
from support import recipes
from support.clustered import clustered

EF = [1, 2, 4, 16, 64]


DOCS, QUERIES = clustered(2000, 32, 60, seed=1)


def _load(index: dict[str, Any], tmp_path: Path) -> Any:
    return load_recipe(recipes.recipe("sweep", cache=tmp_path,
                                      candidates=[{"name": "c", "index": index}]))


# -- the recipe ---------------------------------------------------------------------------

@pytest.mark.parametrize(("index", "field", "needle", "fix"), [
    ({"kind": "pgvector", "sweep": {"nprobe": [1, 2]}}, "index.sweep.nprobe",
     "unknown key 'nprobe'", "ef_search, probes"),
    ({"kind": "pgvector", "sweep": {"m": [8, 16]}}, "index.sweep",
     "m is a build-time parameter", "search-time parameters ef_search, probes"),
    ({"kind": "pgvector", "sweep": {"ef_construction": [64, 128]}}, "index.sweep",
     "build-time", "ef_search"),
    ({"kind": "pgvector", "index": "ivfflat", "sweep": {"lists": [8, 16]}}, "index.sweep",
     "build-time", "probes"),
    ({"kind": "qdrant", "sweep": {"hnsw_config": [1, 2]}}, "index.sweep", "build-time",
     "hnsw_ef, oversampling"),
    ({"factory": "HNSW8", "sweep": {"factory": [1, 2]}}, "index.sweep", "build-time",
     "efSearch, nprobe"),
    ({"kind": "pgvector", "sweep": {"ef_search": []}}, "index.sweep", "empty",
     "give the values"),
    ({"kind": "pgvector", "sweep": {"ef_search": [40, 20]}}, "index.sweep",
     "not strictly increasing", "smallest"),
    ({"kind": "pgvector", "sweep": {"ef_search": [20, 20]}}, "index.sweep",
     "not strictly increasing", "smallest"),
    ({"kind": "pgvector", "sweep": {"ef_search": [10, 20], "probes": [1, 2]}},
     "index.sweep", "exactly one search-time parameter", "second variant"),
    ({"kind": "pgvector", "sweep": {}}, "index.sweep", "exactly one", "second variant"),
    ({"kind": "pgvector", "sweep": {"probes": [1, 2]}}, "index",
     "probes apply to index: ivfflat", "values this index takes"),
    ({"kind": "pgvector", "sweep": {"ef_search": [10, 5000]}}, "index", "at 5000",
     "values this index takes"),
    ({"kind": "qdrant", "sweep": {"oversampling": [1.0, 2.0]}}, "index",
     "apply to quantized vectors", "quantization_config"),
    ({"kind": "exact", "sweep": {"efSearch": [1, 2]}}, "index.sweep", "unknown key 'sweep'",
     "kind"),
])
def test_a_sweep_the_index_cannot_do_is_exit_2_naming_field_and_fix(
        index: dict[str, Any], field: str, needle: str, fix: str, tmp_path: Path) -> None:
    with pytest.raises(InputError) as err:
        _load(index, tmp_path)
    assert err.value.field == f"candidates.0.{field}"
    assert needle in err.value.message and fix in err.value.fix
    path = recipes.write(tmp_path / "bad.yaml", recipes.recipe(
        "sweep", cache=tmp_path, candidates=[{"name": "c", "index": index}]))
    assert main(["validate", str(path)]) == 2


def test_each_kind_sweeps_its_own_search_parameter(tmp_path: Path) -> None:
    pg = _load({"kind": "pgvector", "m": 16, "ef_construction": 64, "ef_search": 40,
                "sweep": {"ef_search": [10, 20, 40, 80]}}, tmp_path).candidates[0].index
    assert pg.sweep_options().parameter() == ("ef_search", (10, 20, 40, 80))
    assert pg.configured() == 40 and pg.at(10).search_options().ef_search == 10
    assert "sweep" not in pg.record()  # the variant's own record is unchanged
    qd = _load({"kind": "qdrant", "quantization_config": {"binary": {}},
                "search_params": {"quantization": {"rescore": True, "oversampling": 2.0}},
                "sweep": {"oversampling": [1.0, 2.0, 4.0]}}, tmp_path).candidates[0].index
    at = qd.at(4.0).search_options()
    assert at.quantization.oversampling == 4.0 and at.quantization.rescore is True
    assert qd.configured() == 2.0
    fa = _load({"factory": "IVF16,Flat", "sweep": {"nprobe": [1, 4]}},
               tmp_path).candidates[0].index
    assert fa.configured() is None and fa.at(4).search_options().values() == {"nprobe": 4}


# -- one build, every value -------------------------------------------------------------

def _faiss(**sweep: list[int]) -> ann.FaissOptions:
    return ann.FaissOptions(factory="HNSW8", search={"efSearch": 16}, sweep=sweep)


def test_the_index_is_built_once_and_searched_at_every_value(
        monkeypatch: pytest.MonkeyPatch) -> None:
    adds = []
    real_add = ann.FaissIndex.add
    monkeypatch.setattr(ann.FaissIndex, "add",
                        lambda self, docs: (adds.append(len(docs.ids)), real_add(self, docs)))
    run = run_index(_faiss(efSearch=EF), DOCS, QUERIES, 20, where="candidates.c.index")
    assert adds == [len(DOCS.ids)]  # one build and ingest for the run and all five values
    assert run.sweep is not None
    name, points = run.sweep
    assert name == "efSearch" and [p.value for p in points] == EF
    assert [p.proof.params["efSearch"] for p in points] == EF  # read back from FAISS
    assert run.proof.params["efSearch"] == 16  # the variant's own search, as configured
    for p in points:
        assert p.seconds.shape == (len(QUERIES.ids),) and (p.seconds > 0).all()
    exact = run_index(ExactOptions(), DOCS, QUERIES, 20, where="x").ranking
    own = run_index(_faiss(efSearch=[16]), DOCS, QUERIES, 20, where="x").sweep[1][0]
    np.testing.assert_array_equal(own.ranking.indices, run.ranking.indices)
    assert not np.array_equal(points[0].ranking.indices[:, :10], exact.indices[:, :10])


# -- the fixed sequence and the cheapest point ------------------------------------------

def test_the_fixed_sequence_stops_at_the_first_value_that_does_not_pass() -> None:
    rows, cheapest = fixed_sequence(
        [10, 20, 40, 80, 160], ["pass", "pass", "inconclusive", "pass", "pass"],
        [1.0, 2.0, 3.0, 4.0, 5.0])
    assert [r.tested for r in rows] == [False, False, True, True, True]
    assert [r.certified for r in rows] == [False, False, False, True, True]
    # 10 and 20 passed their own tests, but the sequence stopped at 40: not certified
    assert cheapest == 80


def test_the_cheapest_point_is_the_lowest_p50_then_the_lowest_value() -> None:
    assert fixed_sequence([10, 20, 40], ["pass"] * 3, [3.0, 1.0, 2.0])[1] == 20
    assert fixed_sequence([10, 20, 40], ["pass"] * 3, [2.0, 1.0, 1.0])[1] == 20
    assert fixed_sequence([10, 20, 40], ["pass"] * 3, [None, None, None])[1] == 10
    assert fixed_sequence([10, 20, 40], ["pass", "pass", "fail"], [1.0, 1.0, 1.0])[1] is None
    assert fixed_sequence([10, 20], ["ungated", "ungated"], [1.0, 2.0])[1] is None


# -- gates at each value, from the stored values ----------------------------------------

def _qrels(exact: Any) -> Qrels:
    """The exact top 3 of each query judged relevant: an index that misses them loses."""
    return Qrels({q: {exact.doc_ids[i]: 1 for i in exact.indices[row, :3]}
                  for row, q in enumerate(exact.query_ids)})


def test_each_value_is_gated_and_the_cheapest_certified_is_marked(tmp_path: Path) -> None:
    sections = SimpleNamespace(metrics=["nDCG@10"], reference_metrics=["overlap@10"])
    folder, ds, name = RunFolder(tmp_path), "synthetic", "hnsw"
    folder.prepare()
    exact = run_index(ExactOptions(), DOCS, QUERIES, 20, where="x").ranking
    judged = _qrels(exact)
    run = run_index(_faiss(efSearch=EF), DOCS, QUERIES, 20, where="candidates.c.index")
    measures = parse_measures(sections.metrics)
    ref_values = evaluate_qrels(exact, judged, measures)
    folder.write_per_query(ds, "ref", ref_values)
    own = evaluate_qrels(run.ranking, judged, measures)
    folder.write_per_query(ds, name, own)
    write_loss_views(folder, ds, name, sections, judged, exact, exact, run.ranking, own, None)
    record = record_sweep(folder, ds, name, sections, judged, exact, exact, run.sweep,
                          run.options.configured(), None)
    recall = [p["recall@10"] for p in record["points"]]
    assert recall[0] < 0.9 and recall[-1] > 0.95 and recall[-1] >= recall[0]
    assert all(p["p50_ms"] > 0 and p["p99_ms"] >= p["p50_ms"] and p["queries_per_s"] > 0
               for p in record["points"])
    ref = folder.read_per_query(ds, "ref")
    pairs = loss_pairs(folder, ds, name, folder.read_per_query(ds, name, like=ref), ref)
    gate = GateSpec("overlap@10", "reference", min=0.9, loss="index", column="overlap@10")
    part = sweep_summary([gate], pairs, folder, ds, name, record, ref, extra_values=None,
                         resamples=500, seed=0)
    assert part.parameter == "efSearch" and part.configured == 16
    assert part.procedure == "fixed_sequence" and part.alpha == {gate.label: 0.05}
    assert [p.value for p in part.points] == EF
    assert part.points[-1].verdict == "pass" and part.points[0].verdict != "pass"
    tested = [p.tested for p in part.points]
    assert tested == sorted(tested)  # untested values only below the first non-pass
    certified = [p for p in part.points if p.certified]
    assert certified and part.cheapest == min(certified, key=lambda p: (p.p50_ms, p.value)
                                              ).value
    assert all("at efSearch=" in c.gate for p in part.points for c in p.checks)


def test_a_sweep_point_is_judged_on_its_own_values(tmp_path: Path) -> None:
    """The per-value files hold the measures of that value's ranking (not the variant's)."""
    sections = SimpleNamespace(metrics=["nDCG@10"], reference_metrics=["overlap@10"])
    folder = RunFolder(tmp_path)
    folder.prepare()
    exact = run_index(ExactOptions(), DOCS, QUERIES, 20, where="x").ranking
    judged = _qrels(exact)
    run = run_index(_faiss(efSearch=[1, 64]), DOCS, QUERIES, 20, where="x")
    record = record_sweep(folder, "d", "v", sections, judged, exact, exact, run.sweep,
                          None, None)
    low = folder.read_per_query("d", "v.sweep0.index")
    assert float(np.mean(low.values["overlap@10"])) == pytest.approx(
        record["points"][0]["recall@10"])
    assert isinstance(low, PerQuery)


# -- what the docs and the shipped recipe say -------------------------------------------

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_sweep_and_the_shipped_recipe_read_as_written(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "vector-databases.md").read_text()
    section = page.split("## A sweep of one search-time parameter", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    candidates = yaml.safe_load(block)
    swept = {c["name"]: c["index"] for c in candidates}
    recipe = _load(swept["pg-hnsw"], tmp_path)
    assert recipe.candidates[0].index.sweep_options().parameter()[0] == "ef_search"
    recipe = _load(swept["qd-binary"], tmp_path)
    assert recipe.candidates[0].index.sweep_options().parameter()[0] == "oversampling"
    shipped = load_recipe(ROOT / "recipes" / "vector-db.yaml")
    sweeps = {c.name: c.index.sweep_options().parameter()[0] for c in shipped.candidates
              if c.index is not None and c.index.sweep_options() is not None}
    assert sweeps == {"fp32-pg-hnsw": "ef_search", "fp32-qd-binary": "oversampling"}
