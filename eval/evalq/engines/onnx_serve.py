"""A folder an ONNX server (Infinity's optimum engine) serves evalq's own graph from.

``{onnx_dir}`` in a ``load.launch`` command is this folder, so the served candidate runs
the very graph (``model.onnx``, hard-linked from evalq's cache) that the ``onnx`` variant
named by ``onnx_from`` ran in-process and was judged on, beside what a server needs to
load it: the checkpoint's ``config.json`` and tokenizer files. Nothing else in it may end
in ``.onnx``: Infinity globs the folder and, on a CPU, prefers a file whose name contains
"quantize" when there are several.

Two of the copied files are rewritten so the server tokenizes as the recipe says, which
the OpenAI request cannot carry:

- ``config.json``: Infinity's optimum engine truncates at ``max_position_embeddings``
  (512 for MiniLM), not at sentence-transformers' ``max_seq_length`` (256); the served
  copy says the recipe's ``max_length`` when that is shorter (the graph's position table
  is unchanged, it is only read less far). Without this, texts past 256 tokens would
  be encoded whole, unlike in-process;
- ``tokenizer_config.json``: ``truncation_side`` is the recipe's.

Pooling is the server's flag (Infinity: ``--pooling-method mean``; its ``auto`` means CLS
pooling in the optimum engine) and normalization is enforced client-side by the openai
backend; the parity check catches a flag that differs. The folder is cached by the
graph's key and those settings, built in a temporary folder and renamed into place like
the graphs themselves; ``evalq-onnx.json`` in it records what was served.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

from evalq.core.atomicio import write_json
from evalq.core.errors import InputError
from evalq.core.values import EncodingSettings
from evalq.engines.quantize.onnx_graph import GRAPH_FILE, OnnxGraph, cached_graph

# What a server needs beside the graph: the checkpoint's top-level config and tokenizer
# files (weights, READMEs and sentence-transformers' module folders stay behind).
SERVED_SUFFIXES = (".json", ".txt", ".model")
CONFIG_FILE = "config.json"
TOKENIZER_CONFIG = "tokenizer_config.json"


def serving_folder(graph: OnnxGraph, model_path: Path, settings: EncodingSettings,
                   cache_dir: Path) -> tuple[Path, dict[str, Any]]:
    """The folder ``{onnx_dir}`` names for ``graph`` of the checkpoint at ``model_path``,
    and its record (made once per graph and truncation settings)."""
    model_path = Path(model_path)
    if not (model_path / CONFIG_FILE).is_file():
        raise InputError(message=f"{model_path} has no {CONFIG_FILE}, which an ONNX server "
                         "needs beside the graph", file=model_path / CONFIG_FILE,
                         field="model.path", fix="point the recipe at a transformers "
                         "checkpoint folder (config.json and tokenizer files)")
    blob = json.dumps({"graph": graph.key, "max_length": settings.max_length,
                       "truncation_side": settings.truncation_side, "layout": 1},
                      sort_keys=True)
    key = hashlib.sha256(blob.encode()).hexdigest()[:16]

    def make(work: Path) -> dict[str, Any]:
        _link(graph.path, work / GRAPH_FILE)
        copied = [p.name for p in sorted(model_path.iterdir()) if p.is_file()
                  and p.suffix in SERVED_SUFFIXES and not p.name.endswith(".index.json")]
        for name in copied:
            shutil.copyfile(model_path / name, work / name)
        rewritten = _tokenize_as_recipe(work, settings)
        return {"served_graph": str(graph.path), "graph_key": graph.key,
                "graph": graph.info, "source": str(model_path), "files": copied,
                "rewritten": rewritten}

    folder = cached_graph(cache_dir / f"onnx-serve-{key}", make)
    return folder.path.parent, {"onnx_dir": str(folder.path.parent), **folder.info}


def _link(source: Path, target: Path) -> None:
    """A hard link where the file system allows one (the graph is the same bytes), else a
    copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def _tokenize_as_recipe(folder: Path, settings: EncodingSettings) -> dict[str, Any]:
    """Rewrite the copied config files so the server truncates where the recipe does;
    returns what changed (file -> key -> [checkpoint's, served])."""
    changed: dict[str, Any] = {}
    config = json.loads((folder / CONFIG_FILE).read_text())
    limit = config.get("max_position_embeddings")
    if isinstance(limit, int) and settings.max_length < limit:
        config["max_position_embeddings"] = settings.max_length
        write_json(folder / CONFIG_FILE, config)
        changed[CONFIG_FILE] = {"max_position_embeddings": [limit, settings.max_length]}
    tok_path = folder / TOKENIZER_CONFIG
    if tok_path.is_file():
        tok = json.loads(tok_path.read_text())
        old = tok.get("truncation_side", "right")
        if old != settings.truncation_side:
            tok["truncation_side"] = settings.truncation_side
            write_json(tok_path, tok)
            changed[TOKENIZER_CONFIG] = {"truncation_side": [old, settings.truncation_side]}
    return changed


__all__ = ["SERVED_SUFFIXES", "serving_folder"]
