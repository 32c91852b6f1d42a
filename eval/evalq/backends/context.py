"""What a backend builder receives besides the variant (its own module, so builders
such as ``vllm_build`` need not import the factory that imports them)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evalq.core import EncodingSettings


@dataclass(frozen=True)
class BuildContext:
    """What a builder may need beyond the variant: resolved paths and where logs go."""

    model_path: Path
    settings: EncodingSettings
    logs_dir: Path
    device: str  # "cpu" or "cuda", resolved from the variant's "auto"
    cache_dir: Path  # where derived artifacts (quantized checkpoints) are kept
