"""User graph files (``onnx: {file: ...}``, ``openvino: {file: ...}``), resolved and
checked where the recipe is read.

Every other path in a recipe (a dataset, a run file, a model folder) is relative to the
recipe's folder; graph paths were relative to the working directory and checked only when
the backend opened them, after the models had loaded. So ``evalq validate`` said ok for a
graph that does not exist, for a folder, and for ``~nosuchuser/x.onnx``, which then ended
in exit 3 (pathlib cannot expand the home of a user the machine does not have). Here each
path is expanded, made absolute against the recipe's folder (the working folder for a
recipe given as a dict), and refused with exit 2 at its line unless it names a file (an
OpenVINO IR with its ``.bin`` beside it). An empty path or one holding a NUL character is
left to the options model (``engines.options.GraphFile``), which refuses it.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evalq.core.errors import InputError
from evalq.recipe.yamlsource import KeyPath, Located

GRAPH_OPTIONS = ("onnx", "openvino")


def _variants(data: Any) -> Iterator[tuple[KeyPath, dict[str, Any]]]:
    """Every variant mapping of the recipe (dense, and each pipeline's reranker's) with
    its key path."""
    if not isinstance(data, dict):
        return
    if isinstance(data.get("reference"), dict):
        yield ("reference",), data["reference"]
    for i, variant in enumerate(_listed(data.get("candidates"))):
        if isinstance(variant, dict):
            yield ("candidates", i), variant
    for i, pipeline in enumerate(_listed(data.get("pipelines"))):
        reranker = pipeline.get("reranker") if isinstance(pipeline, dict) else None
        if not isinstance(reranker, dict):
            continue
        base: KeyPath = ("pipelines", i, "reranker")
        if isinstance(reranker.get("reference"), dict):
            yield (*base, "reference"), reranker["reference"]
        for j, variant in enumerate(_listed(reranker.get("candidates"))):
            if isinstance(variant, dict):
                yield (*base, "candidates", j), variant


def _listed(value: Any) -> list[Any]:
    """A list as written, else nothing here (the schema refuses what is not a list)."""
    return value if isinstance(value, list) else []


def _graph_files(data: Any) -> Iterator[tuple[KeyPath, str, dict[str, Any]]]:
    for path, variant in _variants(data):
        for key in GRAPH_OPTIONS:
            if variant.get("backend") != key:
                continue  # another backend's options: the schema refuses them, by name
            options = variant.get(key)
            if not isinstance(options, dict):
                continue
            text = options.get("file")
            if isinstance(text, str) and text.strip() and "\0" not in text:
                yield (*path, key, "file"), key, options


def _resolved(text: str, key: str, folder: Path, fail: Any) -> Path:
    try:
        path = Path(text).expanduser()
    except RuntimeError:
        user = text.split("/", 1)[0]
        raise fail(f"'{text}': {user} names no user's home folder on this machine",
                   "write the path out in full, or relative to the recipe's folder") from None
    path = path if path.is_absolute() else folder / path
    name, kind = (("ONNX", "ONNX graph (model.onnx)") if key == "onnx"
                  else ("OpenVINO", "OpenVINO IR (openvino_model.xml)"))
    if path.is_dir():
        raise fail(f"{name} file '{path}' is a folder, not a graph file",
                   f"name the {kind} inside it")
    if not path.is_file():
        raise fail(f"{name} file '{path}' does not exist (relative paths are from the "
                   f"recipe's folder, {folder})", f"point it at the {kind}, or drop 'file' "
                   "to let evalq export the checkpoint")
    weights = path.with_suffix(".bin")
    if key == "openvino" and not weights.is_file():
        raise fail(f"'{path}' has no weights file '{weights.name}' beside it",
                   "copy the IR's .bin next to its .xml")
    return path


def resolve_graph_files(located: Located, file: Path) -> Located:
    """``located`` with every user graph path absolute (a copy when any is given);
    :class:`InputError` (exit 2) at the path's line for one that names no graph file."""
    if next(_graph_files(located.data), None) is None:
        return located
    folder = file.resolve().parent
    data = copy.deepcopy(located.data)
    for path, key, options in _graph_files(data):

        def fail(message: str, fix: str, path: KeyPath = path) -> InputError:
            where_file, line = located.where(path)
            return InputError(message=message, file=where_file or file, line=line,
                              field=".".join(map(str, path)), fix=fix)

        options["file"] = str(_resolved(options["file"], key, folder, fail))
    return Located(data, located.lines)


__all__ = ["resolve_graph_files"]
