"""What a last-token-pooled (decoder) embedder needs from its tokenizer: the EOS its
pooling reads, the padding side, and a one-line account of both for ``evalq plan``.

Decoder embedders (Qwen3-Embedding, gte-Qwen2, e5-mistral) pool the hidden state of the
last token, and were trained with an EOS token in that place. Where that EOS comes from
differs by model: Qwen3-Embedding's current ``tokenizer.json`` appends it in its
post-processor (its first release did not, and every engine then pooled the last word);
e5-mistral's card tells users to append it by hand. sentence-transformers and vLLM both
take whatever the tokenizer produces, so evalq does the same by default and appends the
EOS itself only when the recipe says ``encoding: {append_eos: true}``; the plan says which
of these happens, read from the tokenizer's files without loading anything.

Padding side does not change what evalq pools (the pooling finds the last *unmasked*
position, see :func:`evalq.engines.textfront.pool`), but it is the model's setting and
the first thing a hand-written last-token pooling gets wrong, so it is recorded and shown.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evalq.core.errors import InputError
from evalq.core.values import EncodingSettings


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) and value else None


def eos_token(path: str | Path) -> str | None:
    """The tokenizer's EOS token text (``tokenizer_config.json``, else
    ``special_tokens_map.json``), or None when it names none."""
    path = Path(path)
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        config = _json(path / name)
        if isinstance(config, dict) and _token_text(config.get("eos_token")):
            return _token_text(config["eos_token"])
    return None


def _appended(processor: Any) -> str | None:
    """The special token a ``tokenizers`` post-processor puts at the end of one text."""
    if not isinstance(processor, dict):
        return None
    kind = processor.get("type")
    if kind == "TemplateProcessing":
        single = processor.get("single") or [{}]
        return (single[-1].get("SpecialToken") or {}).get("id")
    if kind in ("BertProcessing", "RobertaProcessing"):
        sep = processor.get("sep") or [None]
        return sep[0]
    if kind == "Sequence":
        for inner in reversed(processor.get("processors") or []):
            found = _appended(inner)
            if found:
                return found
    return None


def tokenizer_appended_token(path: str | Path) -> str | None:
    """The special token the model's tokenizer appends to every text, read from
    ``tokenizer.json``'s post-processor; None when it appends none (or has no such file)."""
    data = _json(Path(path) / "tokenizer.json")
    return _appended(data.get("post_processor")) if isinstance(data, dict) else None


def padding_side(path: str | Path) -> str:
    config = _json(Path(path) / "tokenizer_config.json")
    side = config.get("padding_side") if isinstance(config, dict) else None
    return side if side in ("right", "left") else "right"


def eos_problem(path: str | Path, settings: EncodingSettings, *,
                served: bool = False) -> str | None:
    """Why ``append_eos`` cannot be honoured for this model, or None. ``served``: the
    variant sends texts to a server that tokenizes them, so evalq cannot append anything."""
    if not settings.append_eos:
        return None
    eos = eos_token(path)
    if eos is None:
        return ("append_eos is set but the model's tokenizer names no eos_token "
                "(tokenizer_config.json / special_tokens_map.json)")
    if served and tokenizer_appended_token(path) != eos:
        return ("append_eos is set, but this variant sends texts to a server that tokenizes "
                "them itself, and the tokenizer does not append the EOS: evalq would be "
                "unable to add it, and the server would pool each text's last word")
    return None


def eos_summary(path: str | Path, settings: EncodingSettings) -> str:
    """Where the token the pooling reads comes from, in words."""
    eos, appended = eos_token(path), tokenizer_appended_token(path)
    if appended is not None and appended == eos:
        extra = " (append_eos has nothing to add)" if settings.append_eos else ""
        return f"EOS {eos!r} appended by the tokenizer's post-processor{extra}"
    if settings.append_eos:
        return f"EOS {eos!r} appended to the token ids by evalq (append_eos)"
    if appended is not None:
        return f"tokenizer ends every text with {appended!r}"
    if settings.pooling == "last":
        return ("no EOS: the tokenizer appends none, so the pooled token is each text's last "
                "word (set encoding.append_eos: true if the model card says to add EOS)")
    return "no token appended"


def token_summary(path: str | Path, settings: EncodingSettings) -> str:
    """Pooling, padding side, EOS and instructions of one variant: what ``evalq plan``
    prints before anything loads, because these are where engines disagree silently."""
    query = repr(settings.query_prefix) if settings.query_prefix else "none"
    doc = repr(settings.document_prefix) if settings.document_prefix else "none"
    return (f"pooling {settings.pooling}, padding {settings.padding_side}, "
            f"{eos_summary(path, settings)}; instruction for queries {query}, "
            f"for documents {doc}")


# -- token ids with the EOS appended (in-process and vLLM engine alike) -------------------


def eos_to_append(tokenizer: Any, settings: EncodingSettings) -> int | None:
    """The EOS id evalq must append to every text's ids, or None: not asked for, or the
    tokenizer already ends each text with it (appending twice would shift the pooled
    position onto a second EOS the model never saw)."""
    if not settings.append_eos:
        return None
    eos_id = tokenizer.eos_token_id
    if eos_id is None:
        raise InputError(message="append_eos is set but the tokenizer has no eos_token",
                         field="encoding.append_eos",
                         fix="remove append_eos, or use a tokenizer that defines eos_token")
    probe = tokenizer("a")["input_ids"]
    return None if probe and probe[-1] == eos_id else int(eos_id)


def ids_with_eos(tokenizer: Any, texts: Sequence[str], max_length: int,
                 eos_id: int) -> list[list[int]]:
    """Token ids truncated to ``max_length - 1`` (the tokenizer's side) plus the EOS, so
    a truncated text still ends in the token the pooling reads."""
    ids = tokenizer(list(texts), truncation=True, max_length=max_length - 1, padding=False,
                    return_attention_mask=False, return_token_type_ids=False)["input_ids"]
    return [[*row, eos_id] for row in ids]
