"""Rerankers: in-process cross-encoder and bi-encoder scorer against sentence-transformers,
quantized rerankers, the score cache, fidelity measures, attribution, HTTP rerank clients.

The cross-encoder here is the fixture built from MiniLM's encoder plus a seeded, untrained
head (``evalq.engines.rerank_fixture``): its scores measure fidelity (quantized vs float32, one
backend vs another), not relevance.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from evalq.core.errors import InputError
from evalq.encode.cache import EmbeddingCache
from evalq.encode.pairs import CachedEmbeddings, score_pairs
from evalq.encode.scorecache import ScoreCache
from evalq.engines.reranker import BiEncoderScorer, CrossEncoderReranker, RerankSettings, check_head
from evalq.execute.pipelines import attribution, rerank
from evalq.measure.fidelity import ScorePair, evaluate_fidelity, pooled_drift, tie_rate
from evalq.measure.registry import parse_measures


def _uncached() -> CachedEmbeddings:
    """The scorer on its own: the texts it is asked for, batched among themselves."""
    return CachedEmbeddings(None, batch_tokens=2048, composition=None, layout=None)


@pytest.fixture(scope="session")
def pairs(mixed_texts) -> tuple[list[str], list[str]]:
    """24 pairs: short queries against real documents, some over the 256-token limit."""
    queries = [t[:60] for t in mixed_texts[:6]]
    docs = mixed_texts[6:]
    qs = [queries[i % len(queries)] for i in range(24)]
    ds = [docs[(i * 7) % len(docs)] for i in range(24)]
    return qs, ds


@pytest.fixture(scope="session")
def fp32_reranker(cross_encoder_path):
    reranker = CrossEncoderReranker(cross_encoder_path, settings=RerankSettings())
    yield reranker
    reranker.close()


@pytest.mark.model
def test_fixture_is_built_once_and_is_a_sequence_classifier(cross_encoder_path, tmp_path):
    from evalq.engines.rerank_fixture import build_minilm_cross_encoder

    config = json.loads((cross_encoder_path / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["num_labels"] == 1 if "num_labels" in config else len(config["id2label"]) == 1
    again = build_minilm_cross_encoder(cross_encoder_path.parent)
    assert again == cross_encoder_path
    other = build_minilm_cross_encoder(tmp_path)  # built elsewhere: identical bytes
    assert (other / "model.safetensors").read_bytes() == \
        (cross_encoder_path / "model.safetensors").read_bytes()


@pytest.mark.model
def test_inprocess_equals_sentence_transformers_cross_encoder(cross_encoder_path, pairs,
                                                              fp32_reranker):
    from sentence_transformers import CrossEncoder

    qs, ds = pairs
    ours, stats = score_pairs(fp32_reranker, qs, ds, batch_tokens=1024)
    peer = CrossEncoder(str(cross_encoder_path), max_length=256, device="cpu")
    theirs = peer.predict(list(zip(qs, ds)), batch_size=8)
    assert np.abs(ours - theirs).max() <= 1e-4
    assert stats.computed == len(set(zip(qs, ds))) and stats.batches >= 2
    assert np.ptp(ours) > 0.01  # the seeded head spreads scores, so orders are meaningful


@pytest.mark.model
def test_activation_none_and_softmax_head_checks(cross_encoder_path, pairs, fp32_reranker):
    qs, ds = pairs
    raw = CrossEncoderReranker(cross_encoder_path, settings=RerankSettings(activation="none"))
    try:
        logits = raw.score(qs[:4], ds[:4])
    finally:
        raw.close()
    assert np.allclose(1 / (1 + np.exp(-logits)), fp32_reranker.score(qs[:4], ds[:4]),
                       atol=1e-6)
    with pytest.raises(InputError, match="softmax"):
        check_head(1, RerankSettings(activation="softmax"), cross_encoder_path)
    with pytest.raises(InputError) as info:
        check_head(3, RerankSettings(activation="sigmoid"), cross_encoder_path)
    assert info.value.field == "reranker.label"
    check_head(3, RerankSettings(activation="softmax", label=2), cross_encoder_path)


@pytest.mark.model
def test_unexpected_label_count_is_refused_before_loading(cross_encoder_path, tmp_path):
    bad = tmp_path / "three-labels"
    shutil.copytree(cross_encoder_path, bad)
    config = json.loads((bad / "config.json").read_text())
    config["id2label"] = {str(i): f"LABEL_{i}" for i in range(3)}
    config["label2id"] = {f"LABEL_{i}": i for i in range(3)}
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(InputError) as info:
        CrossEncoderReranker(bad, settings=RerankSettings())
    assert "3 labels" in info.value.message and info.value.field == "reranker.label"


@pytest.mark.model
@pytest.mark.parametrize("kwargs", [
    {"dtype": "bfloat16"},
    {"quantization": {"method": "torch-dynamic-int8"}},
    {"quantization": {"method": "bitsandbytes", "bits": 8}},
])
def test_quantized_rerankers_differ_measurably(cross_encoder_path, pairs, fp32_reranker,
                                               kwargs):
    qs, ds = pairs
    reference = fp32_reranker.score(qs, ds)
    quantized = CrossEncoderReranker(cross_encoder_path, settings=RerankSettings(), **kwargs)
    try:
        scores = quantized.score(qs, ds)
        assert quantized.record.method != "dtype" or quantized.record.bits == 16
    finally:
        quantized.close()
    delta = np.abs(scores - reference)
    assert delta.max() > 1e-4  # quantization moved the scores...
    assert delta.max() < 0.3  # ...without breaking the model
    assert np.corrcoef(scores, reference)[0, 1] > 0.8


@pytest.mark.model
def test_bi_encoder_scorer_is_cosine_of_sentence_transformers(minilm_path, minilm_settings,
                                                              pairs):
    from sentence_transformers import SentenceTransformer

    qs, ds = pairs
    scorer = BiEncoderScorer(minilm_path, settings=minilm_settings, embeddings=_uncached())
    try:
        ours = scorer.score(qs, ds)
        calls = scorer.forward_calls
        # A later chunk with texts seen before embeds only the new ones (here: none).
        again = scorer.score(list(reversed(qs)), list(reversed(ds)))
        assert scorer.forward_calls == calls
        np.testing.assert_array_equal(again, ours[::-1])
    finally:
        scorer.close()
    model = SentenceTransformer(str(minilm_path), device="cpu")
    q = model.encode(qs, normalize_embeddings=True)
    d = model.encode(ds, normalize_embeddings=True)
    assert np.abs(ours - (q * d).sum(axis=1)).max() <= 1e-4


def _dense_stage_cache(minilm_path, texts, root, chunk_size):
    """What a run's fp32 in-process reference leaves in the embedding cache for a dataset
    (the runner's options for it: 2,048-token batches of at most 256, length-sorted)."""
    from evalq.encode.batching import encode_texts
    from evalq.engines.inprocess import InProcessEncoder
    from evalq.engines.modelinfo import resolve_settings

    encoder = InProcessEncoder(minilm_path, settings=resolve_settings(minilm_path, {}))
    try:
        for role, role_texts in texts.items():
            encode_texts(encoder, role_texts, role=role, cache=EmbeddingCache(root),
                         chunk_size=chunk_size, batch_tokens=2048, max_batch=256,
                         progress=False)
        return encoder.fingerprint()
    finally:
        encoder.close()


def _bi_encoder(minilm_path, variant, cache, layout):
    from evalq.encode.pairs import build_reranker
    from evalq.plan.pipelines import RerankerSpec

    spec = RerankerSpec(model=str(minilm_path), kind="bi-encoder")
    scorer, _, _ = build_reranker(spec, variant, minilm_path, "cpu", embedding_cache=cache,
                                  layout=layout)
    return scorer


def _scored(scorer, qs, ds):
    try:
        return scorer.score(qs, ds), scorer.forward_calls
    finally:
        scorer.close()


def test_bi_encoder_scorer_reads_the_dense_stages_vectors(minilm_path, minilm_settings, pairs,
                                                         tmp_path):
    from evalq.encode.composition import NEAR_INVARIANT_TOLERANCE
    from evalq.encode.pairs import DenseLayout
    from evalq.plan.pipelines import RerankerVariant

    qs, ds = pairs
    texts = {"document": [*dict.fromkeys(ds), "a document no query proposed"],
             "query": list(dict.fromkeys(qs))}
    fingerprint = _dense_stage_cache(minilm_path, texts, tmp_path, chunk_size=8)
    layout = DenseLayout(texts, 8, frozenset({fingerprint}))
    cache = EmbeddingCache(tmp_path)
    shared, calls = _scored(_bi_encoder(minilm_path, RerankerVariant(name="fp32"), cache,
                                        layout), qs, ds)
    # Every document and query comes from the dense stage's chunks: nothing is encoded.
    assert calls == 0
    assert cache.stats().writes == 0 and cache.stats().hits == 4 + 1  # 4 doc + 1 query chunk
    # The same layout without a cache computes it: the scores never depend on the cache.
    uncached, calls = _scored(_bi_encoder(minilm_path, RerankerVariant(name="fp32"), None,
                                          layout), qs, ds)
    assert calls > 0
    np.testing.assert_array_equal(shared, uncached)
    # The scorer on its own (the texts of these pairs only, batched among themselves):
    # fp32 vectors differ only by the rounding of other batch shapes.
    alone = BiEncoderScorer(minilm_path, settings=minilm_settings, embeddings=_uncached())
    own, _ = _scored(alone, qs, ds)
    assert np.abs(shared - own).max() <= NEAR_INVARIANT_TOLERANCE


def test_a_batch_dependent_bi_encoder_keeps_its_own_batches_and_caches_them(
        minilm_path, minilm_settings, pairs, tmp_path):
    from evalq.encode.pairs import DenseLayout
    from evalq.plan.pipelines import RerankerVariant

    qs, ds = pairs
    quant = {"method": "torch-dynamic-int8"}
    variant = RerankerVariant(name="dyn-int8", quantization=quant)
    alone = BiEncoderScorer(minilm_path, settings=minilm_settings, quantization=quant,
                            embeddings=_uncached())
    before, _ = _scored(alone, qs, ds)  # what the scorer always computed, without a cache
    texts = {"document": list(dict.fromkeys(ds)), "query": list(dict.fromkeys(qs))}
    scorer = _bi_encoder(minilm_path, variant, EmbeddingCache(tmp_path), None)
    # Even a layout naming its fingerprint is not adopted: its vectors depend on batching.
    layout = DenseLayout(texts, 8, frozenset({scorer.fingerprint()}))
    scorer.close()
    first, calls = _scored(_bi_encoder(minilm_path, variant, EmbeddingCache(tmp_path),
                                       layout), qs, ds)
    assert calls > 0
    np.testing.assert_array_equal(first, before)
    cache = EmbeddingCache(tmp_path)  # a second scorer: the same texts computed nothing
    again, calls = _scored(_bi_encoder(minilm_path, variant, cache, layout), qs, ds)
    assert calls == 0 and cache.stats().hits > 0 and cache.stats().writes == 0
    np.testing.assert_array_equal(again, before)


def test_dense_layout_names_the_batch_invariant_variants_that_ran():
    from types import SimpleNamespace

    from evalq.encode.pairs import dense_layout
    from evalq.recipe.schema import load_recipe

    recipe = load_recipe({
        "name": "t", "model": {"path": "m"}, "datasets": ["pydocs"], "cache_chunk": 64,
        "reference": {"name": "fp32"},
        "candidates": [{"name": "dyn-int8", "quantization": {"method": "torch-dynamic-int8"}},
                       {"name": "int8-vectors", "vectors": {"quantize": "int8"}},
                       {"name": "fp16", "dtype": "float16"}]})
    records = {"fp32": {"backend": {"fingerprint": "a"}},
               "dyn-int8": {"backend": {"fingerprint": "b"}},  # batch-dependent
               "int8-vectors": {"backend": {"fingerprint": "a"}}}  # fp16: did not run
    corpus = SimpleNamespace(texts_for_encoding=lambda sep: [f"title{sep}body"])
    dataset = SimpleNamespace(corpus=corpus, queries=SimpleNamespace(texts=("q",)))
    layout = dense_layout(recipe.variants, records, dataset, recipe.title_separator,
                          recipe.cache_chunk)
    assert layout.fingerprints == {"a"} and layout.chunk_size == 64
    assert layout.texts == {"document": ["title body"], "query": ["q"]}


class _Flaky:
    """Wraps a reranker; raises after ``fail_after`` score calls (a dying backend)."""

    def __init__(self, inner, fail_after: int) -> None:
        self.inner, self.fail_after, self.calls = inner, fail_after, 0
        self.kind = inner.kind

    def fingerprint(self):
        return self.inner.fingerprint()

    def pair_lengths(self, q, d):
        return self.inner.pair_lengths(q, d)

    def score(self, q, d):
        self.calls += 1
        if self.calls > self.fail_after:
            raise RuntimeError("backend died")
        return self.inner.score(q, d)


@pytest.mark.model
def test_score_cache_resumes_an_interrupted_scoring(fp32_reranker, pairs, tmp_path):
    qs, ds = pairs
    cache = ScoreCache(tmp_path)
    flaky = _Flaky(fp32_reranker, fail_after=1)
    with pytest.raises(RuntimeError, match="died"):
        score_pairs(flaky, qs, ds, cache=cache, batch_tokens=100_000, max_batch=8,
                    chunk_size=8)
    done, first = score_pairs(fp32_reranker, qs, ds, cache=cache, chunk_size=8)
    assert first.cached == 8 and first.computed == len(set(zip(qs, ds))) - 8
    again, second = score_pairs(fp32_reranker, qs, ds, cache=cache)
    assert second.computed == 0 and second.pairs_per_s is None
    np.testing.assert_array_equal(done, again)
    np.testing.assert_allclose(done, fp32_reranker.score(qs, ds), atol=1e-6)
    cache.close()


@pytest.mark.model
def test_short_answer_from_a_reranker_is_an_input_error(fp32_reranker, pairs):
    class Short(_Flaky):
        def score(self, q, d):
            return self.inner.score(q, d)[:-1]

    qs, ds = pairs
    with pytest.raises(InputError, match="scores for"):
        score_pairs(Short(fp32_reranker, 99), qs, ds)


@pytest.mark.model
def test_pipeline_order_equals_sorting_the_scores_directly(fp32_reranker, pairs):
    qs, ds = pairs
    docs = np.array([[0, 1, 2, 3, 4, 5], [6, 7, 8, 9, -1, -1]])
    texts = list(ds[:10])
    scores = np.full(docs.shape, np.nan)
    for row, query in enumerate(qs[:2]):
        keep = docs[row] >= 0
        scores[row, keep] = fp32_reranker.score([query] * keep.sum(),
                                                [texts[i] for i in docs[row, keep]])
    doc_ids = tuple(f"d{i}" for i in range(10))
    ranking = rerank(("q0", "q1"), doc_ids, docs, scores, cutoff=4)
    for row in range(2):
        keep = docs[row] >= 0
        direct = docs[row, keep][np.argsort(-scores[row, keep], kind="stable")][:4]
        assert ranking.indices[row].tolist() == direct.tolist()


def test_fidelity_measures_against_scipy():
    from scipy.stats import kendalltau, spearmanr, wasserstein_distance

    rng = np.random.default_rng(0)
    ref = rng.random((5, 20))
    cand = ref + rng.normal(0, 0.05, ref.shape)
    cand[0] = np.round(cand[0], 1)  # a coarse reranker: ties
    docs = np.tile(np.arange(20), (5, 1))
    docs[4, 15:] = -1
    ref[4, 15:] = cand[4, 15:] = np.nan
    pair = ScorePair(tuple(f"q{i}" for i in range(5)), docs, ref, cand,
                     tuple(f"d{i:02d}" for i in range(20)))
    measures = parse_measures(["score_tau", "score_spearman", "rerank_overlap@5", "abs_delta",
                               "abs_delta_p99", "score_shift", "tie_rate"])
    values = evaluate_fidelity(pair, measures).values
    for i in range(5):
        r, c = ref[i][docs[i] >= 0], cand[i][docs[i] >= 0]
        assert values["score_tau"][i] == pytest.approx(kendalltau(r, c)[0])
        assert values["score_spearman"][i] == pytest.approx(spearmanr(r, c)[0])
        assert values["abs_delta"][i] == pytest.approx(np.abs(c - r).mean())
        assert values["score_shift"][i] == pytest.approx(wasserstein_distance(r, c))
        top_r = set(np.argsort(-r)[:5]) if i else None
        if top_r is not None:
            assert values["rerank_overlap@5"][i] == pytest.approx(
                len(top_r & set(np.argsort(-c)[:5])) / 5)
    assert values["tie_rate"][0] > 0 and values["tie_rate"][1] == 0
    assert tie_rate(np.array([0.5, 0.5, 0.5, 0.1])) == pytest.approx(0.5)
    same = evaluate_fidelity(ScorePair(pair.query_ids, docs, ref, ref, pair.doc_ids),
                             measures).values
    assert np.allclose(same["score_tau"], 1) and np.allclose(same["rerank_overlap@5"], 1)
    assert np.allclose(same["abs_delta"], 0)
    drift = pooled_drift(pair)
    assert drift["pairs"] == 95 and drift["p99_abs_delta"] >= drift["mean_abs_delta"]


def test_attribution_parts_add_up():
    from evalq.plan.gates import StatsOptions

    rng = np.random.default_rng(1)
    ref, retr, rer, both = (rng.random(60) for _ in range(4))
    parts = attribution(ref, retr, rer, both, StatsOptions(resamples=500))
    total = parts["total"]["delta"]
    summed = (parts["retriever_only"]["delta"] + parts["reranker_only"]["delta"]
              + parts["interaction"]["delta"])
    assert total == pytest.approx(summed, abs=1e-12)
    assert total == pytest.approx(float(np.mean(both - ref)))
    assert parts["total"]["ci_low"] <= total <= parts["total"]["ci_high"]


@pytest.mark.model
@pytest.mark.parametrize("style", ["tei", "rerank-api"])
def test_http_rerank_clients_match_inprocess(rerank_server, cross_encoder_path, pairs,
                                             fp32_reranker, style):
    """TEI itself cannot run here: the server is a stand-in following TEI's and the
    Cohere/Jina /v1/rerank documented schemas, scoring with sentence-transformers."""
    from evalq.engines.rerank_http import HttpReranker

    qs, ds = pairs
    rerank_server.state.requests.clear()
    client = HttpReranker(rerank_server.url, style=style, model="fixture", activation="sigmoid",
                          max_length=256, tokenizer_path=cross_encoder_path)
    try:
        scores, _ = score_pairs(client, qs, ds, self_batching=True)
        described = client.describe()
    finally:
        client.close()
    assert np.abs(scores - fp32_reranker.score(qs, ds)).max() <= 1e-4
    path, payload = rerank_server.state.requests[0]
    if style == "tei":
        assert path == "/rerank" and payload["raw_scores"] is False
        assert payload["truncate"] is True and payload["truncation_direction"] == "Right"
        assert all(len(p["texts"]) <= 8 for _, p in rerank_server.state.requests)
        assert described["info"]["model_id"] == "evalq/minilm-cross-encoder-fixture"
    else:
        assert path == "/v1/rerank" and payload["top_n"] == len(payload["documents"])
        assert payload["return_documents"] is False


@pytest.mark.model
@pytest.mark.parametrize("style", ["tei", "rerank-api"])
def test_server_returning_fewer_scores_is_exit_2(rerank_server, pairs, style):
    from evalq.engines.rerank_http import HttpReranker

    qs, ds = pairs
    rerank_server.state.drop_one = True
    try:
        client = HttpReranker(rerank_server.url, style=style, model=None, activation="sigmoid",
                              max_length=256)
        with pytest.raises(InputError) as info:
            client.score(qs[:3], ds[:3])
        client.close()
    finally:
        rerank_server.state.drop_one = False
    assert "returned scores for" in info.value.message and info.value.field == "http.url"
