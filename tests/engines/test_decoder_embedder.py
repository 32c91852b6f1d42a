"""The fixture decoder embedder in-process: sentence-transformers as the oracle, and one
test per classic last-token mistake, each computing the mistaken embedding independently
(through the bare model) and asserting evalq's output is the right one and not that.

The fixture's weights are random: these tests measure fidelity between implementations,
not relevance.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from evalq.core.values import EncodingSettings
from evalq.encode.batching import encode_texts
from evalq.engines.decoder_fixture import EOS_TOKEN, QUERY_INSTRUCTION, build_decoder_embedder
from evalq.engines.inprocess import InProcessEncoder
from evalq.engines.lasttoken import eos_summary, token_summary, tokenizer_appended_token
from evalq.engines.modelinfo import default_settings
from support.stdlib_texts import stdlib_docstrings

pytestmark = pytest.mark.model

ORACLE_COSINE = 0.99999
QUERIES = ["how do I parse json", "sort a list in place", "capital of France",
           "read a file line by line", "x"]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    """Real texts of very different lengths (padding matters), a few past 256 tokens."""
    docs = sorted(stdlib_docstrings(), key=len)
    return [*docs[::max(1, len(docs) // 24)][:24], "\n\n".join(docs[-3:])]


@pytest.fixture(scope="module")
def st_model(decoder_path: Path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(decoder_path), device="cpu")


@pytest.fixture(scope="module")
def encoder(decoder_path: Path, decoder_settings: EncodingSettings):
    enc = InProcessEncoder(decoder_path, settings=decoder_settings)
    yield enc
    enc.close()


def _rows_cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return (a * b).sum(axis=1)


def _bare_last_states(path: Path, ids: list[list[int]]) -> np.ndarray:
    """Each text alone through the bare Qwen3Model (no padding at all): its last state,
    normalized. Independent of evalq's tokenization, padding and pooling."""
    import torch
    from transformers import AutoModel

    model = AutoModel.from_pretrained(str(path)).eval()
    out = []
    with torch.inference_mode():
        for row in ids:
            hidden = model(input_ids=torch.tensor([row])).last_hidden_state
            out.append(torch.nn.functional.normalize(hidden[0, -1], dim=0).numpy())
    return np.stack(out)


def test_fixture_is_deterministic_and_shaped_like_qwen3_embedding(decoder_path, tmp_path):
    from evalq.core.weights import model_fingerprint

    again = build_decoder_embedder(tmp_path / "models")
    assert again.name == decoder_path.name
    assert model_fingerprint(again) == model_fingerprint(decoder_path)
    config = json.loads((decoder_path / "config.json").read_text())
    assert config["model_type"] == "qwen3" and config["architectures"] == ["Qwen3ForCausalLM"]
    assert config["head_dim"] == 64 and config["is_matryoshka"] is True
    settings = default_settings(decoder_path)
    assert (settings.pooling, settings.padding_side, settings.normalize) == ("last", "left", True)
    assert settings.query_prefix == QUERY_INSTRUCTION and settings.document_prefix == ""
    assert tokenizer_appended_token(decoder_path) == EOS_TOKEN
    assert "relevance" in (decoder_path / "README.md").read_text()


def test_embeddings_are_not_degenerate(encoder, texts):
    """Random weights could pool every text to nearly the EOS embedding; they must not."""
    vectors = encoder.embed(texts[:12])
    sims = vectors @ vectors.T
    off = sims[~np.eye(len(sims), dtype=bool)]
    assert off.mean() < 0.5, off.mean()


def test_sentence_transformers_oracle_documents_and_queries(encoder, st_model, texts):
    """evalq's documents = ST's encode without prompt; evalq's queries = ST's encode with
    prompt_name='query' (the instruction from config_sentence_transformers.json)."""
    docs = encode_texts(encoder, texts, role="document", progress=False, batch_tokens=2048)
    want_docs = st_model.encode(texts, batch_size=8, convert_to_numpy=True)
    assert _rows_cosine(docs.vectors, want_docs).min() >= ORACLE_COSINE
    queries = encode_texts(encoder, QUERIES, role="query", progress=False)
    want_queries = st_model.encode(QUERIES, prompt_name="query", convert_to_numpy=True)
    assert _rows_cosine(queries.vectors, want_queries).min() >= ORACLE_COSINE


# -- mistake 1: right padding with naive last-position pooling ------------------------


@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_side_does_not_move_the_pooled_token(decoder_path, decoder_settings, texts,
                                                     side):
    import dataclasses

    import torch

    settings = dataclasses.replace(decoder_settings, padding_side=side)
    enc = InProcessEncoder(decoder_path, settings=settings)
    try:
        batch = texts[:10]
        got = enc.embed(batch)
        padded = enc.tokenize(batch)
        assert enc._tokenizer.padding_side == side
        ids = [row[mask.bool()].tolist() for row, mask in
               zip(padded["input_ids"], padded["attention_mask"])]
        alone = _bare_last_states(decoder_path, ids)
        assert _rows_cosine(got, alone).min() >= ORACLE_COSINE
        # The mistake, computed independently: the state at the batch's last position.
        with torch.inference_mode():
            hidden = enc._model(**padded).last_hidden_state
        naive = torch.nn.functional.normalize(hidden[:, -1], dim=1).numpy()
        lengths = padded["attention_mask"].sum(dim=1).numpy()
        short = lengths < lengths.max()
        assert short.any()
        if side == "right":  # the naive position is a pad token for every shorter text
            assert _rows_cosine(got[short], naive[short]).max() < 0.99
        else:  # with left padding the last position is the real last token
            assert _rows_cosine(got, naive).min() >= ORACLE_COSINE
    finally:
        enc.close()


# -- mistake 2: a missing EOS -----------------------------------------------------------


def test_the_pooled_token_is_the_eos(encoder, decoder_path, texts):
    batch = texts[:6]
    padded = encoder.tokenize(batch)
    eos_id = encoder._tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    ids = [row[mask.bool()].tolist() for row, mask in
           zip(padded["input_ids"], padded["attention_mask"])]
    assert all(row[-1] == eos_id and eos_id not in row[:-1] for row in ids)
    got = encoder.embed(batch)
    with_eos = _bare_last_states(decoder_path, ids)
    without = _bare_last_states(decoder_path, [row[:-1] for row in ids])
    assert _rows_cosine(got, with_eos).min() >= ORACLE_COSINE
    assert _rows_cosine(got, without).max() < 0.99


@pytest.fixture(scope="module")
def no_eos_tokenizer_path(decoder_path: Path, tmp_path_factory) -> Path:
    """The fixture with a tokenizer that appends nothing (as Qwen3-Embedding's first
    release): only ``append_eos`` can put the EOS back."""
    out = tmp_path_factory.mktemp("no-eos") / "model"
    shutil.copytree(decoder_path, out)
    data = json.loads((out / "tokenizer.json").read_text())
    data["post_processor"] = None
    (out / "tokenizer.json").write_text(json.dumps(data))
    return out


def test_append_eos_restores_what_the_tokenizer_left_out(no_eos_tokenizer_path, encoder,
                                                         texts):
    import dataclasses

    settings = default_settings(no_eos_tokenizer_path)
    assert tokenizer_appended_token(no_eos_tokenizer_path) is None
    assert "no EOS" in eos_summary(no_eos_tokenizer_path, settings)
    want = encoder.embed(texts[:8])  # the original tokenizer, EOS by its post-processor
    plain = InProcessEncoder(no_eos_tokenizer_path, settings=settings)
    fixed_settings = dataclasses.replace(settings, append_eos=True)
    fixed = InProcessEncoder(no_eos_tokenizer_path, settings=fixed_settings)
    try:
        assert _rows_cosine(plain.embed(texts[:8]), want).max() < 0.99  # the mistake
        assert _rows_cosine(fixed.embed(texts[:8]), want).min() >= ORACLE_COSINE
        # truncated texts keep the EOS in the last place, within max_length
        assert max(fixed.token_lengths(texts)) == settings.max_length
        assert "appended to the token ids by evalq" in token_summary(
            no_eos_tokenizer_path, fixed_settings)
    finally:
        plain.close()
        fixed.close()


def test_append_eos_is_a_no_op_where_the_tokenizer_appends_it(decoder_path, encoder, texts):
    import dataclasses

    settings = dataclasses.replace(encoder.settings, append_eos=True)
    again = InProcessEncoder(decoder_path, settings=settings)
    try:
        assert again.token_lengths(texts) == encoder.token_lengths(texts)
        np.testing.assert_allclose(again.embed(texts[:4]), encoder.embed(texts[:4]),
                                   atol=1e-6)
    finally:
        again.close()


# -- mistake 3: the instruction applied to documents ------------------------------------


def test_instruction_goes_to_queries_only(encoder, st_model, texts):
    docs = texts[:6]
    got = encode_texts(encoder, docs, role="document", progress=False).vectors
    instructed = st_model.encode(docs, prompt=QUERY_INSTRUCTION, convert_to_numpy=True)
    plain = st_model.encode(docs, convert_to_numpy=True)
    assert _rows_cosine(got, plain).min() >= ORACLE_COSINE
    assert _rows_cosine(got, instructed).max() < 0.99  # the mistake differs
    queries = encode_texts(encoder, QUERIES, role="query", progress=False).vectors
    bare = st_model.encode(QUERIES, convert_to_numpy=True)
    assert _rows_cosine(queries, bare).max() < 0.99  # and a query without it differs too


# -- evalq plan on a decoder recipe: pooling, padding, EOS, instruction before loading ----


def _gpu_recipe_on_fixture(tmp_path: Path, decoder_path: Path, dims: int) -> Path:
    """recipes/vllm-gpu-decoder.yaml with its models swapped for the fixture (the same
    architecture, pooling, EOS and instruction as Qwen3-Embedding)."""
    import yaml

    root = Path(__file__).resolve().parents[2]
    data = yaml.safe_load((root / "recipes" / "vllm-gpu-decoder.yaml").read_text())
    data["model"]["path"] = str(decoder_path)
    data["output"], data["cache_dir"] = str(tmp_path / "out"), str(tmp_path / "cache")
    for variant in data["candidates"]:
        if "model" in variant:  # the GPTQ checkpoint
            variant["model"] = str(decoder_path)
        if "dims" in variant.get("vectors", {}):
            variant["vectors"]["dims"] = dims
    path = tmp_path / "decoder.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_plan_of_the_gpu_decoder_recipe_shows_what_engines_disagree_on(decoder_path, tmp_path):
    from evalq.recipe.plan import describe_plan, plan_file

    plan = plan_file(_gpu_recipe_on_fixture(tmp_path, decoder_path, 64), machine=False)
    text = describe_plan(plan)
    tokens = [line for line in text.splitlines() if line.strip().startswith("tokens:")]
    assert len(tokens) == len(plan.variants) == 7
    for line in tokens:
        assert "pooling last, padding left" in line
        assert f"EOS {EOS_TOKEN!r} appended by the tokenizer's post-processor" in line
        assert "instruction for queries 'Instruct: Given a web search query" in line
        assert "for documents none" in line
    assert "index vectors int8, 64 Matryoshka dims" in text
    assert not (tmp_path / "cache").exists()  # nothing loaded, nothing written


def test_gpu_decoder_recipe_dims_beyond_the_model_are_refused(decoder_path, tmp_path):
    from evalq.recipe.plan import PlanError, plan_file

    with pytest.raises(PlanError) as err:
        plan_file(_gpu_recipe_on_fixture(tmp_path, decoder_path, 256), machine=False)
    text = str(err.value)
    assert text.count("vectors.dims 256 exceeds the model's 128 dimensions") == 2


def test_append_eos_on_a_server_that_cannot_get_it_is_refused_at_plan_time(
        no_eos_tokenizer_path, decoder_path, tmp_path, capsys):
    """A served variant tokenizes on the server: with a tokenizer that appends no EOS,
    evalq could not append it, so the plan refuses (exit 2) instead of pooling last words.
    With a tokenizer that appends it, the same variant plans."""
    from evalq.app.cli import main
    from support import recipes

    def recipe(model: Path) -> Path:
        return recipes.write(tmp_path / f"{model.name}.yaml", recipes.recipe(
            "served-eos", model=str(model), cache=tmp_path / "cache", queries=5, docs=10,
            encoding={"append_eos": True},
            candidates=[{"name": "remote", "backend": "openai",
                         "http": {"url": "http://127.0.0.1:9", "model": "m"}}]))

    assert main(["plan", str(recipe(no_eos_tokenizer_path))]) == 2
    err = capsys.readouterr().err
    assert "candidates.0.encoding.append_eos" in err and "server" in err
    assert main(["plan", str(recipe(decoder_path))]) == 0
    assert "append_eos has nothing to add" in capsys.readouterr().out
