"""ONNX graphs of a checkpoint: exported by evalq, or a user's ``model.onnx``; checked.

The export starts from the same HF checkpoint the in-process backend loads and outputs
what its :class:`GraphHead` names: the token states (``last_hidden_state``) of an
embedding model, or the logits of a cross-encoder's sequence-classification head.
Pooling, normalization, truncation, prefixes, pair formatting and the score activation
stay evalq's (``textfront``, ``pairfront``), so an ONNX graph differs from the in-process
model in its kernels only. The graph is traced with eager attention: the SDPA path builds its mask
with Python branches a trace would freeze to the example's shape.

Exports (and the graphs quantization methods derive from them) are cached under the
run's cache folder, keyed by the weight fingerprint like the W8A8 checkpoints; each
folder carries ``evalq-onnx.json`` (exporter, opset, library versions, and a checksum of
every file, verified on reuse), written last, so a folder without it, or whose files no
longer match it, is made again.

A graph is checked before it serves: a file that does not parse (corrupt, truncated), a
graph ``onnx.checker`` refuses, one whose inputs are not a tokenizer's, one whose output
width differs from the model's hidden size, and one whose operators ONNX Runtime cannot
run are each an :class:`InputError` naming the file and the fix (exit 2). A reranker's
graph is held to the same checks, with its output's width against the head's labels.
"""

from __future__ import annotations

import hashlib
import json
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalq.core.atomicio import built_folder, write_json
from evalq.core.errors import InputError, MissingExtraError
from evalq.core.host import engine_versions
from evalq.core.weights import model_fingerprint

RECORD_FILE = "evalq-onnx.json"
GRAPH_FILE = "model.onnx"
OPSET = 17
EXPORTER = "torch.onnx.export (TorchScript)"
OUTPUT = "last_hidden_state"
TOKEN_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


@dataclass(frozen=True)
class GraphHead:
    """What an exported graph outputs, and how its first output is checked.

    ``output`` is the output's name (and part of the export's cache key), ``auto_class``
    the transformers class the export loads, ``rank`` the output's rank, ``width`` the
    checkpoint's config key its last dimension must equal, and ``what`` / ``fix`` the
    words of the refusal when a graph's output is something else.
    """

    output: str
    auto_class: str
    rank: int
    width: str
    what: str
    fix: str

    def wrapped(self, outputs: Any) -> Any:
        """The output this head names, from a transformers model's output object."""
        return getattr(outputs, self.output)


TOKEN_STATES = GraphHead(
    OUTPUT, "AutoModel", 3, "hidden_size",
    f"hidden size is {{expected}}; evalq pools the token states ('{OUTPUT}') itself",
    f"export the encoder's token states ({OUTPUT}) as the first output, of the checkpoint "
    "this recipe names")
LOGITS = GraphHead(
    "logits", "AutoModelForSequenceClassification", 2, "num_labels",
    "classification head has {expected} label(s); evalq applies the score activation to "
    "the logits itself",
    "export the sequence-classification model's logits (batch, num_labels) as the first "
    "output, of the checkpoint this pipeline's reranker names")


@dataclass(frozen=True)
class OnnxGraph:
    """A graph file and what made it (``info``: exporter, opset, versions, parent)."""

    path: Path
    key: str  # identifies the graph's content: source fingerprint + how it was made
    info: dict[str, Any] = field(default_factory=dict)
    reused: bool = False


def require(module: str, extra: str, purpose: str) -> Any:
    """Import an optional library or say which extra installs it (exit 2)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(module, extra, purpose) from None


def _key(blob: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


def cached_graph(folder: Path, make: Callable[[Path], dict[str, Any]],
                 file: str = GRAPH_FILE) -> OnnxGraph:
    """The graph in ``folder`` if complete and intact, else ``make(work_dir)`` (which
    writes ``file`` there and returns its info) run in a temporary folder renamed into
    place, so an interrupted build never leaves a folder that looks complete.

    The record keeps a checksum of every file the build wrote (``files``), verified on
    every reuse, as the embedding cache verifies its chunks: a cached graph whose bytes
    changed, whose ``.bin`` is gone or whose record is unreadable is rebuilt with one
    warning naming the folder (it was read as it was, or refused as a recipe field)."""
    key = folder.name.rsplit("-", 1)[-1]
    if folder.exists():
        info, problem = _verified(folder, file)
        if info is not None:
            return OnnxGraph(folder / file, key, info, reused=True)
        warnings.warn(f"cached graph {folder} cannot be trusted ({problem}); rebuilding it",
                      RuntimeWarning, stacklevel=2)

    def build(work: Path) -> dict[str, Any]:
        made = make(work)
        write_json(work / RECORD_FILE, {**made, "files": _checksums(work)})
        return made

    return OnnxGraph(folder / file, key, built_folder(
        folder, build, complete=lambda f: _verified(f, file)[0] is not None))


def _digest(path: Path) -> str:
    digest = hashlib.blake2b(digest_size=16)
    with path.open("rb") as handle:
        while chunk := handle.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _checksums(folder: Path) -> dict[str, str]:
    """Every file a build wrote (its record aside), by relative path."""
    return {p.relative_to(folder).as_posix(): _digest(p) for p in sorted(folder.rglob("*"))
            if p.is_file() and p.name != RECORD_FILE}


def _verified(folder: Path, file: str) -> tuple[dict[str, Any] | None, str]:
    """The record of an intact cached graph (without its checksums), or None and what
    is wrong with the folder."""
    try:
        record = json.loads((folder / RECORD_FILE).read_text())
    except (OSError, ValueError) as exc:
        return None, f"its record {RECORD_FILE} is unreadable: {exc}"
    files = record.get("files") if isinstance(record, dict) else None
    if not isinstance(files, dict) or file not in files:
        return None, (f"its record {RECORD_FILE} lists no checksums of its files (an "
                      "older evalq, or a damaged record)")
    for name, expected in files.items():
        path = folder / str(name)
        if not path.is_file():
            return None, f"{name} is missing"
        if _digest(path) != expected:
            return None, f"{name} does not match its checksum"
    return {k: v for k, v in record.items() if k != "files"}, ""


def export_onnx(model_path: Path, cache_dir: Path, head: GraphHead = TOKEN_STATES,
                ) -> OnnxGraph:
    """The fp32 ONNX export of the checkpoint at ``model_path`` with ``head``'s output
    (made once per weights and head). onnx is required only to export: a cached
    export is reused without importing it (a second of ``evalq verify``'s time)."""
    source = model_fingerprint(model_path)
    key = _key({"model": source, "exporter": EXPORTER, "opset": OPSET, "output": head.output,
                "torch": engine_versions(("torch",))["torch"]})

    def make(work: Path) -> dict[str, Any]:
        require("onnx", "onnx", "exporting to ONNX")
        inputs = _export(model_path, work / GRAPH_FILE, head)
        return {"exporter": EXPORTER, "opset": OPSET, "output": head.output, "inputs": inputs,
                "source": str(model_path), "source_fingerprint": source,
                "attn_implementation": "eager", "dynamic_axes": ["batch", "sequence"],
                "versions": engine_versions(("torch", "transformers", "onnx", "onnxruntime"))}

    return cached_graph(cache_dir / f"onnx-export-{key}", make)


def _export(model_path: Path, out: Path, head: GraphHead) -> list[str]:
    import torch
    import transformers

    auto = getattr(transformers, head.auto_class)
    model = auto.from_pretrained(str(model_path), dtype=torch.float32,
                                 attn_implementation="eager", local_files_only=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_path),
                                                           local_files_only=True)
    # A pair example for a cross-encoder, so token_type_ids carry both segments.
    texts = ["an example text to trace", "a second, longer example text"]
    example = tokenizer(texts, *([texts[::-1]] if head.rank == 2 else []), padding=True,
                        return_tensors="pt")
    names = [n for n in TOKEN_INPUTS if n in example]

    class HeadOutput(torch.nn.Module):
        """The model with positional inputs and the head's output as the one output."""

        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *args: Any) -> Any:
            return head.wrapped(self.model(**dict(zip(names, args, strict=True))))

    wrapper = HeadOutput().eval()  # eval: export restores the mode it found
    axes: dict[str, dict[int, str]] = {n: {0: "batch", 1: "sequence"} for n in names}
    axes[head.output] = {0: "batch", 1: "sequence"} if head.rank == 3 else {0: "batch"}
    with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
        # The trace's own notes (legacy exporter, constant masks branches): the graph is
        # checked against the model by tests/engines/test_onnx_backend.py, not by these.
        warnings.simplefilter("ignore")
        torch.onnx.export(wrapper, tuple(example[n] for n in names), str(out),
                          input_names=names, output_names=[head.output], dynamic_axes=axes,
                          opset_version=OPSET, dynamo=False)
    return names


def user_graph(file: str | Path, *, field_name: str, kind: str = "ONNX",
               siblings: tuple[str, ...] = (),
               libraries: tuple[str, ...] = ("onnx", "onnxruntime")) -> OnnxGraph:
    """A user's ready-made graph file (``model.onnx``; ``openvino_model.xml`` with its
    ``.bin`` sibling): keyed by its content, checked when the backend opens it."""
    path = Path(file).expanduser()
    if not path.is_file():
        raise InputError(message=f"{kind} file '{path}' does not exist", file=path,
                         field=field_name,
                         fix=f"point it at a {path.name or 'graph'} file (or drop it to let "
                         "evalq export the model)")
    digest = hashlib.blake2b(digest_size=8)
    for part in (path, *(path.with_suffix(s) for s in siblings)):
        if part.is_file():
            with part.open("rb") as handle:
                while chunk := handle.read(8 << 20):
                    digest.update(chunk)
    return OnnxGraph(path, digest.hexdigest(), {"exporter": "user file", "file": str(path),
                                                "versions": engine_versions(tuple(libraries))})


def check_graph(path: Path, width: int, *, field_name: str,
                head: GraphHead = TOKEN_STATES) -> list[str]:
    """The graph's token inputs, after refusing a file that is not a usable graph of
    ``head`` (see the module docstring); the output width (``width``: the hidden size, or
    the head's labels) is checked here when the graph states it and again on the first
    batch when it does not."""
    onnx = require("onnx", "onnx", "reading ONNX graphs")
    fix_file = "re-export the model (delete the file to let evalq export it) or copy it again"
    try:
        model = onnx.load(str(path), load_external_data=False)
        onnx.checker.check_model(model)
    except Exception as exc:  # protobuf's DecodeError, onnx's ValidationError, ...
        raise InputError(message=f"'{path}' is not a valid ONNX graph (corrupt or truncated "
                         f"file?): {type(exc).__name__}: {str(exc)[:200]}", file=path,
                         field=field_name, fix=fix_file) from None
    inputs = [i.name for i in model.graph.input]
    unknown = [n for n in inputs if n not in TOKEN_INPUTS]
    if unknown or "input_ids" not in inputs:
        raise InputError(message=f"'{path}' takes inputs {inputs}; an encoder graph takes "
                         f"{', '.join(TOKEN_INPUTS)} (token_type_ids optional)", file=path,
                         field=field_name, fix="export the encoder with those input names")
    stated = output_width(model, head.rank)
    if stated is not None:
        check_width(stated, width, path, field_name, head)
    return inputs


def output_width(model: Any, rank: int = 3) -> int | None:
    """The last dimension of the first output when the graph states it, else None."""
    dims = model.graph.output[0].type.tensor_type.shape.dim
    if len(dims) != rank:
        return -1  # not the head's shape: refused by check_width
    last = dims[-1]
    return int(last.dim_value) if last.HasField("dim_value") else None


_SHAPES = {3: "(batch, sequence, hidden)", 2: "(batch, labels)"}


def check_width(width: int, expected: int, path: Path, field_name: str,
                head: GraphHead = TOKEN_STATES) -> None:
    """Refuse a first output ``width`` wide (-1: of another rank) where ``head`` needs
    ``expected``."""
    if width != expected:
        shape = f"not {_SHAPES[head.rank]}" if width < 0 else f"{width} wide"
        raise InputError(message=f"'{path}': its first output is {shape}, but the model's "
                         f"{head.what.format(expected=expected)}", file=path,
                         field=field_name, fix=head.fix)


def weight_matmuls(path: Path, *, weights_only: bool = True,
                   skip: tuple[str, ...] = ()) -> list[str]:
    """Names of the graph's MatMul nodes: those whose second input is a weight (an
    initializer), i.e. the Linear layers and not the attention products of two
    activations, unless ``weights_only`` is false; minus names matching a ``skip`` regex."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    weights = {i.name for i in graph.initializer}
    return [n.name for n in graph.node if n.op_type == "MatMul"
            and (not weights_only or (len(n.input) > 1 and n.input[1] in weights))
            and not any(re.search(pattern, n.name) for pattern in skip)]


def derived_graph(parent: OnnxGraph, cache_dir: Path, method: str, params: dict[str, Any],
                  make: Callable[[Path, Path], dict[str, Any]], *, file: str = GRAPH_FILE,
                  libraries: tuple[str, ...] = ("onnx", "onnxruntime")) -> OnnxGraph:
    """A graph a quantization method derives from ``parent`` (``make(parent_file,
    out_file)`` returns what to record), cached by the parent's key and the parameters."""
    key = _derived_key(parent, method, params)

    def build(work: Path) -> dict[str, Any]:
        made = make(parent.path, work / file)
        return {**made, "method": method, "params": params, "parent": parent.info,
                "versions": engine_versions(tuple(libraries))}

    return cached_graph(cache_dir / f"graph-{method}-{key}", build, file)


def _derived_key(parent: OnnxGraph, method: str, params: dict[str, Any]) -> str:
    return _key({"parent": parent.key, "method": method, "params": params})


def cached_derived(parent: OnnxGraph, cache_dir: Path, method: str, params: dict[str, Any],
                   *, file: str = GRAPH_FILE) -> OnnxGraph | None:
    """The graph :func:`derived_graph` would return from its cache for these arguments,
    or None where that folder is missing or cannot be trusted (nothing is built, and a
    damaged folder is left for :func:`derived_graph` to warn about and rebuild)."""
    folder = cache_dir / f"graph-{method}-{_derived_key(parent, method, params)}"
    info = _verified(folder, file)[0] if folder.exists() else None
    return None if info is None else OnnxGraph(folder / file, folder.name.rsplit("-", 1)[-1],
                                               info, reused=True)


def versions(*names: str) -> dict[str, str | None]:
    """The installed versions of ``names`` (None where absent), for a graph's record."""
    return engine_versions(names)


__all__ = [
    "GRAPH_FILE",
    "LOGITS",
    "OPSET",
    "OUTPUT",
    "TOKEN_INPUTS",
    "TOKEN_STATES",
    "GraphHead",
    "OnnxGraph",
    "cached_derived",
    "cached_graph",
    "check_graph",
    "check_width",
    "derived_graph",
    "export_onnx",
    "require",
    "user_graph",
    "versions",
    "weight_matmuls",
]
