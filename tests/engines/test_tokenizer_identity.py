"""A certificate's tokenizer identity: loading the class AutoTokenizer resolved, without
AutoTokenizer, gives the same tokenizer, and only where AutoTokenizer would resolve it
again (same transformers, same files).

The point of the direct load is what it does not import (AutoTokenizer pulls in every
model class, accelerate and torch's compiler: seconds of ``evalq verify``), so that is
checked in a fresh interpreter by the modules it loaded, not by a wall-clock time.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evalq.engines.openai_http import TokenCounter
from evalq.engines.tokenizer_identity import (
    TokenizerIdentity,
    folder_digest,
    load_tokenizer,
    resolve,
)

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["How do I read a file line by line?", "Ünïcödé   spacing\tand CAPITALS",
         "short", "word " * 600]  # the last is truncated at max_length
# Modules AutoTokenizer imports and the direct load must not.
AUTO_ONLY = ("transformers.models.auto.auto_factory", "torch._dynamo")


def _folder(tmp_path: Path, source: Path) -> Path:
    """A copy of a model folder's tokenizer and config files (no weights needed)."""
    folder = tmp_path / "model"
    folder.mkdir()
    for file in source.iterdir():
        if file.is_file() and not file.name.endswith(".safetensors"):
            shutil.copy(file, folder / file.name)
    return folder


def test_identity_round_trips_and_refuses_what_is_not_one() -> None:
    known = TokenizerIdentity("transformers.x:Y", "5.0", "ab")
    assert TokenizerIdentity.from_dict(known.as_dict()) == known
    for bad in (None, [], {"class_path": "a"}, {**known.as_dict(), "files": 3}):
        assert TokenizerIdentity.from_dict(bad) is None


def test_the_digest_follows_tokenizer_files_not_weights(tmp_path: Path) -> None:
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": true}')
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    before = folder_digest(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"other weights")
    assert folder_digest(tmp_path) == before
    (tmp_path / "tokenizer_config.json").write_text('{"do_lower_case": false}')
    assert folder_digest(tmp_path) != before


@pytest.mark.model
@pytest.mark.parametrize("model", ["minilm", "decoder"])
def test_the_direct_load_is_the_tokenizer_autotokenizer_returns(model, minilm_path,
                                                                 decoder_path) -> None:
    path = minilm_path if model == "minilm" else decoder_path
    known = resolve(path)
    assert known.class_path.startswith("transformers.")
    auto, direct = load_tokenizer(path), load_tokenizer(path, known)
    assert type(direct) is type(auto)
    for pair in (dict(padding=True, truncation=True, max_length=128),
                 dict(padding=False, truncation=True, max_length=16)):
        assert dict(direct(TEXTS, **pair)) == dict(auto(TEXTS, **pair))
    assert direct.pad_token_id == auto.pad_token_id and direct.eos_token == auto.eos_token


@pytest.mark.model
def test_an_edited_folder_goes_through_autotokenizer(tmp_path: Path, minilm_path: Path
                                                     ) -> None:
    known = resolve(minilm_path)
    folder = _folder(tmp_path, minilm_path)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {**config, "tokenizer_class": "PreTrainedTokenizerFast"}))
    # the certified identity no longer describes this folder: the class AutoTokenizer
    # picks from the edited file loads, not the certified BertTokenizer
    assert type(load_tokenizer(folder, known)) is type(load_tokenizer(folder))
    assert not known.class_path.endswith(type(load_tokenizer(folder)).__qualname__)


@pytest.mark.model
@pytest.mark.parametrize("class_path", [
    "transformers.modeling_utils:PreTrainedModel",  # a model, not a tokenizer
    "transformers.models.bert.tokenization_bert:NoSuchTokenizer",
    "transformers.no_such_module:BertTokenizer",
    "os:system",
])
def test_an_edited_class_is_never_loaded_directly(minilm_path: Path, class_path: str) -> None:
    """A certificate is a file a user hands in: whatever class it names, only a
    transformers tokenizer class loads directly; anything else goes to AutoTokenizer."""
    known = resolve(minilm_path)
    edited = TokenizerIdentity(class_path, known.transformers, known.files)
    assert type(load_tokenizer(minilm_path, edited)) is type(load_tokenizer(minilm_path))


def _imported(path: Path, known: TokenizerIdentity | None) -> dict[str, bool]:
    code = ("import json, sys\n"
            "from evalq.engines.tokenizer_identity import TokenizerIdentity, load_tokenizer\n"
            f"known = TokenizerIdentity.from_dict({known and known.as_dict()!r})\n"
            f"load_tokenizer({str(path)!r}, known)\n"
            f"print(json.dumps({{m: m in sys.modules for m in {list(AUTO_ONLY)!r}}}))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.model
@pytest.mark.process
def test_the_direct_load_imports_none_of_autotokenizers_tables(minilm_path: Path) -> None:
    known = resolve(minilm_path)
    assert not any(_imported(minilm_path, known).values())
    # the check can fail: the AutoTokenizer path does import them, as it must for an
    # identity that another transformers version resolved (this one might resolve
    # another class)
    older = TokenizerIdentity(known.class_path, "4.0.0", known.files)
    assert all(_imported(minilm_path, older).values())


@pytest.mark.model
def test_a_served_endpoints_token_counts_are_the_same_through_the_identity(
        minilm_path: Path, minilm_settings) -> None:
    """``evalq verify --url`` counts the probe's tokens with the certified tokenizer too."""
    known = resolve(minilm_path)
    direct = TokenCounter(minilm_settings, minilm_path, known)
    assert direct.exact and direct(TEXTS) == TokenCounter(minilm_settings, minilm_path)(TEXTS)
    assert direct(TEXTS)[-1] == minilm_settings.max_length  # truncated where the run does
