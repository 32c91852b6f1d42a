"""What identifies a model's weights on disk: one fingerprint per model folder.

Results, caches and derived checkpoints (W8A8, fixtures) are keyed by it, so it lives in
a leaf module that imports nothing but the error type: every part can call it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from evalq.core.errors import InputError

_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
_CHUNK = 8 << 20
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
