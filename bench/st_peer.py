"""sentence-transformers' own int8 CPU paths, the peers of ``bench/cpu_formats.py``.

A user who wants int8 on a CPU without evalq follows sentence-transformers' documentation:
``export_dynamic_quantized_onnx_model`` (ONNX Runtime dynamic int8, with the settings named
for the CPU: ``avx512_vnni``, ``avx512``, ``avx2`` or ``arm64``) or
``export_static_quantized_openvino_model`` (OpenVINO, NNCF static int8), then
``SentenceTransformer(path, backend="onnx"|"openvino", model_kwargs={"file_name": ...})``.
This script does exactly that, so ``cpu_formats.py`` can time those paths in the same run
as evalq's formats.

It runs in its own virtual environment, ``.venv-stpeer`` (``make stpeer-venv``): the
optimum packages these exports need do not import beside the transformers of evalq's
venv. So it imports nothing of evalq; it reads the bench's texts file and writes JSON.

- ``export``: copies the offline model into the cache (the installed package's folder is
  never written) and exports both int8 files there once per numerics class and package
  versions. The OpenVINO export calibrates on the bench's untimed documents, given to
  sentence-transformers' own ``dataset_name`` arguments as a local JSON-lines dataset (its
  default, GLUE SST-2, would need the network), at its default sample count and its own
  384-token padding.
- ``encode NAME``: loads one peer, encodes 16 texts to warm up, then times
  ``model.encode`` over the very batches evalq's encoder forms for the same texts (lists
  of texts, length-sorted, 2,048 padded tokens a batch, passed with ``batch_size`` equal to
  their length, so the padded shapes are evalq's), on ``threads`` threads (ONNX Runtime's
  intra-op threads, OpenVINO's ``INFERENCE_NUM_THREADS``, torch's for the pooling). Prints
  one JSON line: seconds, CPU seconds, docs/s, peak RSS, the int8 file's size, the
  precision OpenVINO compiled it at, and the venv's versions.

``st-ov-qint8`` loads the OpenVINO file as sentence-transformers does by default, with
OpenVINO's default precision (bf16 on a CPU that has it); ``st-ov-qint8-f32`` pins f32,
the precision evalq's ``openvino`` variants run and certify.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import resource
import shutil
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

# name -> (backend, what the export writes, extra OpenVINO settings)
PEERS: dict[str, dict[str, Any]] = {
    "st-onnx-qint8": {"backend": "onnx"},
    "st-ov-qint8": {"backend": "openvino", "ov_config": {}},
    "st-ov-qint8-f32": {"backend": "openvino",
                        "ov_config": {"INFERENCE_PRECISION_HINT": "f32"}},
}
OV_FILE = "openvino/openvino_model_qint8_quantized.xml"
VERSIONS = ("sentence-transformers", "transformers", "torch", "optimum", "optimum-onnx",
            "optimum-intel", "onnxruntime", "openvino", "nncf", "numpy")


def onnx_config(numerics_class: str) -> str:
    """sentence-transformers' dynamic-int8 setting for evalq's numerics class: the one its
    documentation names for that CPU (AMX CPUs have AVX-512 VNNI; AVX2-VNNI and older x86
    get ``avx2``, its reduced-range setting)."""
    arch, _, isa = numerics_class.partition("/")
    if arch in ("arm64", "aarch64"):
        return "arm64"
    if isa in ("amx", "avx512-vnni"):
        return "avx512_vnni"
    return "avx512" if isa == "avx512" else "avx2"


def onnx_file(numerics_class: str) -> str:
    """The file ``export_dynamic_quantized_onnx_model`` writes: named by the setting's
    weight type, which is unsigned for ``avx2`` (``model_quint8_avx2.onnx``) and signed
    for the others."""
    config = onnx_config(numerics_class)
    weights = "quint8" if config == "avx2" else "qint8"
    return f"onnx/model_{weights}_{config}.onnx"


def versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in VERSIONS:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def workdir(cfg: dict[str, Any]) -> Path:
    """The model copy the exports go into: one per numerics class and package versions."""
    tag = hashlib.sha256(json.dumps(versions(), sort_keys=True).encode()).hexdigest()[:12]
    name = cfg["numerics_class"].replace("/", "_") + "-" + tag
    return Path(cfg["cache"]) / "st-peer" / name / "model"


def export(cfg: dict[str, Any]) -> dict[str, Any]:
    from sentence_transformers import (
        SentenceTransformer,
        export_dynamic_quantized_onnx_model,
        export_static_quantized_openvino_model,
    )

    work = workdir(cfg)
    if not work.exists():
        shutil.copytree(cfg["model"], work)
    if not (work / onnx_file(cfg["numerics_class"])).exists():
        model = SentenceTransformer(str(work), backend="onnx", device="cpu")
        export_dynamic_quantized_onnx_model(model, onnx_config(cfg["numerics_class"]),
                                            str(work))
    if not (work / OV_FILE).exists():
        data = work.parent / "calibration"
        data.mkdir(exist_ok=True)
        untimed = json.loads(Path(cfg["texts"]).read_text(encoding="utf-8"))["untimed"]
        (data / "train.jsonl").write_text(
            "".join(json.dumps({"text": text}) + "\n" for _, text in untimed),
            encoding="utf-8")
        model = SentenceTransformer(str(work), backend="openvino", device="cpu")
        export_static_quantized_openvino_model(
            model, None, str(work), dataset_name=str(data), dataset_config_name="default",
            dataset_split="train", column_name="text")
    return {"work": str(work), "versions": versions(),
            "onnx_config": onnx_config(cfg["numerics_class"])}


def load(name: str, cfg: dict[str, Any]) -> tuple[Any, Path]:
    from sentence_transformers import SentenceTransformer

    spec, work, threads = PEERS[name], workdir(cfg), int(cfg["threads"])
    if spec["backend"] == "onnx":
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        file = onnx_file(cfg["numerics_class"])
        kwargs = {"file_name": file, "provider": "CPUExecutionProvider",
                  "session_options": options}
    else:
        file = OV_FILE
        kwargs = {"file_name": file,
                  "ov_config": {"INFERENCE_NUM_THREADS": threads, **spec["ov_config"]}}
    model = SentenceTransformer(str(work), backend=spec["backend"], device="cpu",
                                model_kwargs=kwargs)
    return model, work / file


def ov_precision(model: Any) -> str | None:
    """The inference precision OpenVINO compiled the graph at (None for ONNX Runtime)."""
    request = getattr(model[0].auto_model, "request", None)
    try:
        compiled = getattr(request, "get_compiled_model", lambda: request)()
        value = compiled.get_property("INFERENCE_PRECISION_HINT")
    except (AttributeError, RuntimeError, TypeError):
        return None
    to_string = getattr(value, "to_string", None)  # an openvino Type: 'bf16', 'f32'
    return str(to_string() if callable(to_string) else value)


def encode(name: str, cfg: dict[str, Any]) -> dict[str, Any]:
    import numpy as np
    import torch

    torch.set_num_threads(int(cfg["threads"]))
    texts = json.loads(Path(cfg["texts"]).read_text(encoding="utf-8"))
    timed, batches = texts["timed"], texts["peer_batches"]
    model, file = load(name, cfg)
    model.encode(timed[:16], batch_size=16, normalize_embeddings=True)  # warm-up
    vectors: list[Any] = [None] * len(timed)
    began, cpu = time.perf_counter(), time.process_time()
    for batch in batches:
        out = model.encode([timed[i] for i in batch], batch_size=len(batch),
                           normalize_embeddings=True, convert_to_numpy=True)
        for i, row in zip(batch, out, strict=True):
            vectors[i] = row
    seconds, cpu = time.perf_counter() - began, time.process_time() - cpu
    np.save(cfg["vectors"], np.stack(vectors).astype(np.float32))
    weights = file.with_suffix(".bin") if file.suffix == ".xml" else file
    return {"seconds": seconds, "cpu_seconds": cpu, "docs_per_s": len(timed) / seconds,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "weight_bytes": weights.stat().st_size, "file": str(file.relative_to(file.parents[1])),
            "inference_precision": ov_precision(model), "batches": len(batches),
            "versions": versions()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("action", choices=("export", "encode"))
    parser.add_argument("name", nargs="?", choices=tuple(PEERS))
    parser.add_argument("--config", required=True, help="JSON: model, cache, texts, threads, "
                        "numerics_class (and vectors for encode)")
    args = parser.parse_args(argv)
    cfg = json.loads(args.config)
    if args.action == "encode" and not args.name:
        parser.error("encode needs a peer name")
    out = export(cfg) if args.action == "export" else encode(args.name, cfg)
    sys.stdout.write(json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
