"""The onnx and openvino reranker backends against the in-process cross-encoder.

The cross-encoder is the fixture (MiniLM's encoder + a seeded, untrained one-label head,
``evalq.engines.rerank_fixture``): its scores measure fidelity, not relevance. ONNX
Runtime fp32 and OpenVINO fp32 must give the in-process cross-encoder's scores (max abs
difference tiny, identical rerank order per query, pairs over the length limit included)
and sentence-transformers' ``CrossEncoder.predict``'s, the independent oracle. Their int8
formats are gated like any pipeline candidate (a run below); static int8 calibrates on
pairs made of corpus documents, never the judged queries. Bad input exits 2 naming the
file and the fix.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from evalq.app.cli import main
from evalq.core.errors import InputError, MissingExtraError
from evalq.encode.pairs import build_reranker, score_pairs
from evalq.engines.context import RerankerContext
from evalq.engines.onnx_rerank import build as build_onnx
from evalq.engines.openvino_rerank import build as build_openvino
from evalq.engines.quantize.onnx_graph import LOGITS, TOKEN_STATES, export_onnx
from evalq.plan.pipelines import RerankerSpec, RerankerVariant
from support import recipes

MAX_LENGTH = 256
QUERIES, DOCS_PER_QUERY = 6, 8


@pytest.fixture(scope="session")
def ce_path(tmp_path_factory) -> Path:
    from evalq.engines.rerank_fixture import build_minilm_cross_encoder

    return build_minilm_cross_encoder(tmp_path_factory.mktemp("graph-rerank-models"))


@pytest.fixture(scope="session")
def graph_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("graph-rerank-cache")


@pytest.fixture(scope="session")
def ce_pairs(mixed_texts) -> tuple[list[str], list[str]]:
    """6 queries x 8 documents, queries first (grouped), long documents included."""
    queries = [" ".join(t.split()[:10]) for t in mixed_texts[:QUERIES]]
    docs = mixed_texts[QUERIES:]
    qs = [queries[i // DOCS_PER_QUERY] for i in range(QUERIES * DOCS_PER_QUERY)]
    ds = [docs[(i * 5) % len(docs)] for i in range(QUERIES * DOCS_PER_QUERY)]
    return qs, ds


def _spec(ce_path: Path) -> RerankerSpec:
    return RerankerSpec(model=str(ce_path), max_length=MAX_LENGTH)


def _context(ce_path: Path, cache: Path, variant: RerankerVariant, mixed_texts=None,
             ) -> RerankerContext:
    drawn = [(f"doc{i}", t) for i, t in enumerate(mixed_texts or [])]
    return RerankerContext(spec=_spec(ce_path), variant=variant, model_path=ce_path,
                           device="cpu", batch_tokens=1024, cache_dir=cache,
                           calibration=lambda n, seed: drawn[:n])


@pytest.fixture(scope="session")
def inprocess_scores(ce_path, ce_pairs) -> np.ndarray:
    reranker, _, _ = build_reranker(_spec(ce_path), RerankerVariant(name="fp32"),
                                    ce_path, "cpu")
    try:
        scores, stats = score_pairs(reranker, *ce_pairs, batch_tokens=1024)
    finally:
        reranker.close()
    assert stats.batches >= 3  # several batches of mixed padding
    return scores


def _order(scores: np.ndarray) -> np.ndarray:
    """Each query's documents, best first (a stable sort, as trec_eval breaks no ties here)."""
    return np.argsort(-scores.reshape(QUERIES, DOCS_PER_QUERY), axis=1, kind="stable")


@pytest.mark.model
@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_fp32_scores_equal_the_inprocess_cross_encoder(backend, ce_path, graph_cache,
                                                       ce_pairs, inprocess_scores):
    from sentence_transformers import CrossEncoder

    variant = RerankerVariant(name=backend, backend=backend)
    reranker, _, self_batching = build_reranker(_spec(ce_path), variant, ce_path, "cpu",
                                                cache_dir=graph_cache)
    try:
        scores, stats = score_pairs(reranker, *ce_pairs, batch_tokens=1024)
        described = reranker.describe()
        lengths = reranker.pair_lengths(*ce_pairs)
    finally:
        reranker.close()
    assert not self_batching and stats.forward_calls == stats.batches >= 3
    assert np.abs(scores - inprocess_scores).max() <= 1e-5
    assert np.array_equal(_order(scores), _order(inprocess_scores))
    peer = CrossEncoder(str(ce_path), max_length=MAX_LENGTH, device="cpu")
    oracle = peer.predict(list(zip(*ce_pairs, strict=True)), batch_size=8)
    assert np.abs(scores - oracle).max() <= 1e-4
    assert np.array_equal(_order(scores), _order(np.asarray(oracle)))
    assert max(lengths) == MAX_LENGTH  # truncated pairs were compared too
    assert np.ptp(scores) > 0.01
    info = described["graph_info"]
    root = info.get("parent", info)  # the OpenVINO IR records the export it came from
    assert root["output"] == "logits" and root["opset"] == 17
    assert described["quantization"]["method"] == "none" and described["num_labels"] == 1
    assert described["settings"]["activation"] == "sigmoid"


@pytest.mark.model
def test_logits_export_is_cached_by_weights_beside_the_token_states_one(ce_path,
                                                                        graph_cache):
    cache = graph_cache / "checkpoints"
    logits = export_onnx(ce_path, cache, LOGITS)
    again = export_onnx(ce_path, cache, LOGITS)
    assert again.reused and again.path == logits.path and again.key == logits.key
    states = export_onnx(ce_path, cache, TOKEN_STATES)
    assert states.key != logits.key and states.info["output"] == "last_hidden_state"
    assert logits.info["source_fingerprint"] == states.info["source_fingerprint"]


@pytest.mark.model
@pytest.mark.parametrize("backend, method", [
    ("onnx", "ort-dynamic-int8"), ("onnx", "ort-static-int8"), ("openvino", "nncf-int8")])
def test_int8_formats_derive_recorded_graphs(backend, method, ce_path, graph_cache, ce_pairs,
                                             inprocess_scores, mixed_texts):
    quantization: dict = {"method": method}
    if method != "ort-dynamic-int8":
        quantization["calibration_texts"] = 16
    variant = RerankerVariant(name="q", backend=backend, quantization=quantization)
    build = build_onnx if backend == "onnx" else build_openvino
    reranker = build(_context(ce_path, graph_cache, variant, mixed_texts))
    try:
        scores, _ = score_pairs(reranker, *ce_pairs, batch_tokens=1024)
        record = reranker.describe()["quantization"]
    finally:
        reranker.close()
    assert record["method"] == method and record["bits"] == 8 and record["weight_bytes"] > 0
    delta = np.abs(scores - inprocess_scores)
    assert 1e-5 < delta.max() < 0.3  # int8 moved the scores without breaking the head
    assert np.corrcoef(scores, inprocess_scores)[0, 1] > 0.8
    calibration = record["params"]["graph"].get("calibration")
    if method == "ort-dynamic-int8":
        assert calibration is None
    else:
        assert calibration["count"] == 16 and "never the judged queries" in \
            calibration["source"]
        assert calibration["ids"][:3] == ["doc0|doc0", "doc1|doc2", "doc2|doc2"]


@pytest.mark.model
@pytest.mark.parametrize("backend, extra, tolerance", [
    ("onnx", {"quantization": {"method": "ort-optimize", "level": "O2"}}, 1e-5),
    ("openvino", {"dtype": "float16"}, 2e-3)])
def test_float_formats_keep_the_scores(backend, extra, tolerance, ce_path, graph_cache,
                                       ce_pairs, inprocess_scores):
    """The fused float32 graph and float16 weights: scores move by rounding only."""
    variant = RerankerVariant(name="f", backend=backend, **extra)
    reranker, _, _ = build_reranker(_spec(ce_path), variant, ce_path, "cpu",
                                    cache_dir=graph_cache)
    try:
        scores, _ = score_pairs(reranker, *ce_pairs, batch_tokens=1024)
        record = reranker.describe()["quantization"]
    finally:
        reranker.close()
    assert np.abs(scores - inprocess_scores).max() <= tolerance
    if backend == "onnx":
        assert record["params"]["graph"]["fused_operators"].get("Attention")
    else:
        assert record["bits"] == 16 and record["params"]["graph"]["weights"] == "float16"


@pytest.mark.model
def test_calibration_pairs_are_made_of_corpus_documents(ce_path):
    from evalq.engines.pairfront import QUERY_WORDS, PairFront
    from evalq.engines.reranker import RerankSettings

    drawn = [("a", "one two three"), ("b", " ".join(f"w{i}" for i in range(40))),
             ("c", "gamma")]
    ids, pairs = PairFront(ce_path, RerankSettings()).calibration_samples(drawn)
    assert ids == ["a|a", "b|c", "c|c"]
    assert pairs[1] == (" ".join(f"w{i}" for i in range(QUERY_WORDS)), "gamma")
    assert pairs[0] == ("one two three", "one two three")


# ---------------------------------------------------------------------------- bad input


@pytest.mark.model
def test_user_graphs_are_accepted(ce_path, graph_cache, ce_pairs, tmp_path):
    from evalq.engines.openvino_rerank import build as ov_build

    onnx_file = export_onnx(ce_path, graph_cache / "checkpoints", LOGITS).path
    mine = tmp_path / "model.onnx"
    mine.write_bytes(onnx_file.read_bytes())
    variant = RerankerVariant(name="u", backend="onnx", onnx={"file": str(mine)})
    reranker = build_onnx(_context(ce_path, graph_cache, variant))
    try:
        ours = reranker.score(*(p[:6] for p in ce_pairs))
        assert reranker.describe()["graph_info"]["exporter"] == "user file"
    finally:
        reranker.close()
    import openvino as ov

    xml = tmp_path / "openvino_model.xml"  # float32 weights (save_model's default is fp16)
    ov.save_model(ov.convert_model(str(mine)), str(xml), compress_to_fp16=False)
    variant = RerankerVariant(name="v", backend="openvino", openvino={"file": str(xml)})
    reranker = ov_build(_context(ce_path, graph_cache, variant))
    try:
        theirs = reranker.score(*(p[:6] for p in ce_pairs))
    finally:
        reranker.close()
    assert np.abs(ours - theirs).max() <= 1e-5


@pytest.mark.model
@pytest.mark.parametrize("backend", ["onnx", "openvino"])
def test_truncated_graph_exits_2_naming_the_file(backend, ce_path, graph_cache, tmp_path):
    source = export_onnx(ce_path, graph_cache / "checkpoints", LOGITS).path
    broken = tmp_path / ("model.onnx" if backend == "onnx" else "model.xml")
    data = source.read_bytes()
    broken.write_bytes(data[: len(data) // 3] if backend == "onnx" else b"<?xml version=")
    variant = RerankerVariant(name="u", backend=backend, **{backend: {"file": str(broken)}})
    build = build_onnx if backend == "onnx" else build_openvino
    with pytest.raises(InputError) as caught:
        build(_context(ce_path, graph_cache, variant))
    assert str(broken) in str(caught.value) and "corrupt or truncated" in str(caught.value)
    assert caught.value.fix


def _graph_of_width(path: Path, width: int, rank: int) -> Path:
    """A graph with a tokenizer's inputs whose output is ``width`` wide, of ``rank``."""
    import torch

    class Head(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(40000, width)

        def forward(self, input_ids, attention_mask):
            states = self.embed(input_ids) * attention_mask.unsqueeze(-1)
            return states if rank == 3 else states[:, 0]

    ids = torch.ones((2, 5), dtype=torch.int64)
    torch.onnx.export(Head().eval(), (ids, ids), str(path),
                      input_names=["input_ids", "attention_mask"], output_names=["logits"],
                      dynamo=False, dynamic_axes={"input_ids": {0: "b", 1: "s"},
                                                  "attention_mask": {0: "b", 1: "s"}})
    return path


@pytest.mark.model
@pytest.mark.parametrize("backend", ["onnx", "openvino"])
@pytest.mark.parametrize("width, rank, words", [(3, 2, "3 wide"),
                                                (384, 3, "not (batch, labels)")])
def test_graph_whose_output_is_not_a_score_exits_2(backend, width, rank, words, ce_path,
                                                    graph_cache, tmp_path):
    path = _graph_of_width(tmp_path / "head.onnx", width, rank)
    if backend == "openvino":
        import openvino as ov

        xml = tmp_path / "head.xml"
        ov.save_model(ov.convert_model(str(path)), str(xml))
        path = xml
    variant = RerankerVariant(name="u", backend=backend, **{backend: {"file": str(path)}})
    build = build_onnx if backend == "onnx" else build_openvino
    with pytest.raises(InputError) as caught:
        reranker = build(_context(ce_path, graph_cache, variant))
        reranker.score(["a query"], ["a document"])  # the width of a dynamic output
    message = str(caught.value)
    assert words in message and "1 label(s)" in message and str(path) in message
    assert "logits" in caught.value.fix


@pytest.mark.model
@pytest.mark.parametrize("backend, method", [("onnx", "ort-static-int8"),
                                             ("openvino", "nncf-int8")])
def test_calibration_on_an_empty_corpus_exits_2(backend, method, ce_path, graph_cache):
    variant = RerankerVariant(name="s", backend=backend, quantization={"method": method})
    ctx = dataclasses.replace(_context(ce_path, graph_cache, variant),
                              calibration=lambda n, seed: [])
    build = build_onnx if backend == "onnx" else build_openvino
    with pytest.raises(InputError) as caught:
        build(ctx)
    assert "corpora are empty" in caught.value.message and caught.value.fix


@pytest.mark.model
@pytest.mark.parametrize("backend, module, extra", [("onnx", "onnxruntime", "onnx"),
                                                    ("openvino", "openvino", "openvino")])
def test_missing_library_names_the_extra(backend, module, extra, ce_path, graph_cache,
                                         monkeypatch):
    monkeypatch.setitem(sys.modules, module, None)
    variant = RerankerVariant(name="m", backend=backend)
    build = build_onnx if backend == "onnx" else build_openvino
    with pytest.raises(MissingExtraError) as caught:
        build(_context(ce_path, graph_cache, variant))
    assert f"pip install 'evalq[{extra}]'" in str(caught.value)


def _pipeline_recipe(tmp_path: Path, candidates: list[dict], gates: list[dict] | None = None,
                     kind: str | None = None) -> Path:
    cfg = recipes.recipe(
        "graph-rerank", cache=tmp_path / "cache", output=tmp_path / "out", queries=12,
        docs=40, candidates=[], metrics=["nDCG@5"], reference_metrics=["overlap@5"],
        parity={"enabled": False}, resamples=300,
        pipelines=[{"name": "bm25-ce", "first_stage": {"kind": "bm25"}, "depths": [5],
                    "cutoff": 5, "metrics": ["nDCG@5"], "reference_metrics": ["overlap@5"],
                    "fidelity_metrics": ["score_tau", "rerank_overlap@5", "abs_delta"],
                    "reranker": {"model": "fixture:minilm-cross-encoder", "max_length": 128,
                                 "kind": kind or "cross-encoder", "candidates": candidates},
                    "gates": gates or []}])
    return recipes.write(tmp_path / "recipe.yaml", cfg)


@pytest.mark.parametrize("candidate, words", [
    ({"name": "b", "backend": "onnx", "dtype": "bfloat16"}, "serves dtype float32"),
    ({"name": "q", "backend": "openvino", "quantization": {"method": "ort-dynamic-int8"}},
     "applied by backend onnx, not openvino"),
    ({"name": "o", "backend": "inprocess", "onnx": {"file": "model.onnx"}},
     "'onnx' options apply to backend onnx only"),
    ({"name": "v", "backend": "openvino", "kind": "bi-encoder"},
     "backend openvino serves cross-encoder rerankers, not bi-encoder"),
    ({"name": "g", "backend": "onnx", "device": "cuda"},
     "reranker backend onnx runs on cpu, not cuda"),
])
def test_refused_when_the_recipe_is_read(tmp_path, capsys, candidate, words):
    kind = candidate.pop("kind", None)
    path = _pipeline_recipe(tmp_path, [candidate], kind=kind)
    assert main(["validate", str(path)]) == 2
    assert words in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.model
def test_int8_reranker_candidates_are_gated_in_a_pipeline(tmp_path, capsys):
    """A pipeline run through the CLI: ONNX fp32 scores as the reference does, and the
    int8 candidates each get a stored verdict from the same gates as any candidate."""
    path = _pipeline_recipe(tmp_path, [
        {"name": "ort-fp32", "backend": "onnx"},
        {"name": "ort-int8", "backend": "onnx", "quantization": {"method": "ort-dynamic-int8"}},
        {"name": "ov-int8", "backend": "openvino",
         "quantization": {"method": "nncf-int8", "calibration_texts": 16}}],
        gates=[{"metric": "score_tau", "against": "reranker", "stage": "reranker",
                "min": 0.5},
               {"metric": "rerank_overlap@5", "against": "reranker", "stage": "reranker",
                "min": 0.6}])
    code = main(["run", str(path)])
    assert code in (0, 1), capsys.readouterr().err
    out = tmp_path / "out"
    summary = json.loads((out / "summary.json").read_text())
    pipe = summary["pipelines"]["bm25-ce"]
    combos = pipe["datasets"]["pydocs"]["depths"]["5"]["combinations"]
    for name in ("ort-fp32", "ort-int8", "ov-int8"):
        assert combos[f"bm25+{name}@5"]["verdict"] in ("pass", "fail", "inconclusive")
    assert combos["bm25+ort-fp32@5"]["verdict"] == "pass"
    fidelity = pipe["datasets"]["pydocs"]["depths"]["5"]["fidelity"]
    assert fidelity["ort-fp32"]["drift"]["max_abs_delta"] <= 1e-5
    assert fidelity["ort-int8"]["drift"]["max_abs_delta"] > 1e-5
    manifest = json.loads((out / "manifest.json").read_text())
    ov_int8 = manifest["pipelines"]["bm25-ce"]["rerankers"]["ov-int8"]["backend"]
    calibration = ov_int8["quantization"]["params"]["graph"]["calibration"]
    corpus = set(_pydocs_ids())
    assert calibration["count"] == 16 and all(
        set(i.split("|")) <= corpus for i in calibration["ids"])
    assert pipe["rerankers"]["ort-int8"]["quantization"]["method"] == "ort-dynamic-int8"
    assert main(["gate", str(out)]) == code  # the stored verdicts are re-decided alike


def _pydocs_ids() -> list[str]:
    """The document ids of the pydocs corpus (the run's slice is a part of it)."""
    from evalq.data.pydocs import load_pydocs

    return list(load_pydocs().corpus.ids)


@pytest.mark.slow
@pytest.mark.model
def test_a_corrupt_user_graph_in_a_pipeline_exits_2(tmp_path, capsys):
    broken = tmp_path / "model.onnx"
    broken.write_bytes(b"\x08\x07garbage, not a protobuf")
    path = _pipeline_recipe(tmp_path, [{"name": "mine", "backend": "onnx",
                                        "onnx": {"file": str(broken)}}])
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(broken) in err and "reranker.onnx.file" in err and "Fix:" in err
