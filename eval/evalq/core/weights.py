"""What identifies a model's weights on disk: one fingerprint per model folder.

Results, caches and derived checkpoints (W8A8, fixtures) are keyed by it, so it lives in
a leaf module that imports nothing but the error type: every part can call it.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from evalq.core.errors import InputError

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
_CHUNK = 8 << 20
# safetensors refuses a header above this size (its MAX_HEADER_SIZE); so does the check.
_SAFETENSORS_HEADER_MAX = 100_000_000
_FINGERPRINTS: dict[tuple[str, tuple[tuple[str, int, int], ...]], str] = {}


def is_weight_file(path: Path) -> bool:
    """Whether a folder's file holds weights (by the suffixes the fingerprint hashes)."""
    return path.name.endswith(_WEIGHT_SUFFIXES)


def _weight_files(path: Path) -> list[Path]:
    return sorted(p for p in path.iterdir() if p.is_file() and is_weight_file(p))


def model_fingerprint(path: str | Path) -> str:
    """Hash of config.json, the weight files' names and sizes, and their contents.

    The contents are hashed (BLAKE2b in 8 MiB chunks, ~1 GB/s) because names and sizes
    alone would not notice a fine-tuned checkpoint saved over the old one. The result is
    cached in-process per (path, name, size, mtime) so backends can call it freely.
    """
    path = Path(path)
    files = _weight_files(path)
    if not files:
        raise InputError(
            message=f"model folder '{path}' holds no weight files ({', '.join(_WEIGHT_SUFFIXES)})",
            fix="point at a folder with model.safetensors or pytorch_model.bin",
        )
    stat_key = tuple((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    config = path / "config.json"
    key = (str(path.resolve()), (*stat_key, ("config.json", config.stat().st_mtime_ns, 0)))
    cached = _FINGERPRINTS.get(key)
    if cached is not None:
        return cached
    digest = hashlib.blake2b(digest_size=16)
    digest.update(config.read_bytes())
    for file in files:
        digest.update(f"\0{file.name}\0{file.stat().st_size}\0".encode())
        with file.open("rb") as handle:
            while chunk := handle.read(_CHUNK):
                digest.update(chunk)
    result = digest.hexdigest()
    _FINGERPRINTS[key] = result
    return result


def check_weight_files(path: str | Path) -> None:
    """Refuse a ``.safetensors`` file whose header does not describe it (a copy cut
    short, a file written over): transformers' loader raised a bare ``SafetensorError``
    from deep in the model build, after the plan and the reference, which read as a bug
    in evalq (exit 3). The plan calls this beside the fingerprint; it reads each header
    only (its length, its JSON, where the last tensor ends)."""
    path = Path(path)
    for file in _weight_files(path):
        if not file.name.endswith(".safetensors"):
            continue
        problem = _safetensors_problem(file, file.stat().st_size)
        if problem is not None:
            raise InputError(
                message=f"model folder '{path}': weight file {file.name} is damaged "
                f"({problem})",
                fix="copy the model folder again from where it came from (a copy cut "
                "short or a file written over leaves it so)")


def _tensor_end(entry: Any) -> int | None:
    """Where a header entry's tensor ends in the data (None: no ``[begin, end]`` given)."""
    span = entry.get("data_offsets") if isinstance(entry, dict) else None
    if not (isinstance(span, list) and len(span) == 2
            and all(type(x) is int and x >= 0 for x in span)):
        return None
    return int(span[1])


def _safetensors_problem(file: Path, size: int) -> str | None:
    with file.open("rb") as handle:
        head = handle.read(8)
        length = int.from_bytes(head, "little")
        if len(head) < 8 or length > size - 8:
            return f"{size} bytes: shorter than the header it announces"
        if length > _SAFETENSORS_HEADER_MAX:
            return f"a header of {length} bytes, more than safetensors reads"
        try:
            header = json.loads(handle.read(length))
        except (ValueError, UnicodeDecodeError):
            return "its header is not JSON"
    if not isinstance(header, dict):
        return "its header is not a mapping of tensors"
    ends = [_tensor_end(entry) for name, entry in header.items() if name != "__metadata__"]
    if any(end is None for end in ends):
        return "its header does not give every tensor's offsets"
    data, end = size - 8 - length, max((e for e in ends if e is not None), default=0)
    if end > data:
        return f"its tensors need {end} bytes of data and it holds {data}: cut short"
    return None
