"""Which tokenizer class ``AutoTokenizer`` picks for a model folder, and loading it again
without asking ``AutoTokenizer``.

``AutoTokenizer`` decides a folder's class from its tokenizer_config.json and config.json
through transformers' tables of every model type; importing those tables imports the
modeling code, accelerate and torch's compiler, which on these 2-core machines costs
about 5 s (measured: ``from transformers import AutoTokenizer`` 8.0 s, against 2.2 s for
importing MiniLM's ``BertTokenizer`` and loading it). ``evalq verify`` is meant to answer
in a deploy pipeline within seconds, and the tokenizer is the only thing it needs from
transformers for an ONNX Runtime or OpenVINO candidate.

So a certificate records what ``AutoTokenizer`` resolved (:class:`TokenizerIdentity`):
the class, the transformers version, and a digest of the folder's non-weight files.
With the same transformers version and the same files, ``AutoTokenizer`` resolves the
same class (it reads nothing else; evalq loads with ``local_files_only``), so loading
that class directly, with the keyword arguments ``AutoTokenizer`` passes it, gives the
same tokenizer. Anything else (another version, an edited tokenizer_config.json, a class
outside transformers) goes through ``AutoTokenizer`` as a run does.
"""

from __future__ import annotations

import hashlib
import importlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from evalq.core.host import engine_versions
from evalq.core.weights import is_weight_file

# Files above this size are not tokenizer files (a weight format evalq does not list).
_LARGEST = 64 << 20


@dataclass(frozen=True)
class TokenizerIdentity:
    """The tokenizer ``AutoTokenizer`` resolved for a folder, and under what."""

    class_path: str  # "module:qualname" of the class AutoTokenizer returned
    transformers: str | None  # the transformers version that resolved it
    files: str  # digest of the folder's non-weight files (tokenizer and model configs)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> TokenizerIdentity | None:
        """The identity a certificate stores, or None where it stores none usable (an
        older certificate, or a hand-edited one): then AutoTokenizer decides."""
        if not isinstance(data, dict):
            return None
        fields = (data.get("class_path"), data.get("transformers"), data.get("files"))
        if not all(isinstance(f, str) for f in fields):
            return None
        return cls(*fields)


def folder_digest(model_path: str | Path) -> str:
    """BLAKE2b of the names and bytes of the folder's top-level files that are not
    weights: everything AutoTokenizer reads to choose and build a tokenizer."""
    digest = hashlib.blake2b(digest_size=16)
    for file in sorted(Path(model_path).iterdir()):
        if not file.is_file() or is_weight_file(file) or file.stat().st_size > _LARGEST:
            continue
        digest.update(f"\0{file.name}\0".encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


def identify(tokenizer: Any, model_path: str | Path) -> TokenizerIdentity:
    """The identity of a tokenizer AutoTokenizer loaded from ``model_path``."""
    kind = type(tokenizer)
    return TokenizerIdentity(class_path=f"{kind.__module__}:{kind.__qualname__}",
                             transformers=engine_versions(("transformers",))["transformers"],
                             files=folder_digest(model_path))


def resolve(model_path: str | Path) -> TokenizerIdentity:
    """What AutoTokenizer resolves for ``model_path`` here (``evalq certify`` records it)."""
    return identify(load_tokenizer(model_path), model_path)


def _known_class(known: TokenizerIdentity | None, model_path: Path) -> Any:
    """The class ``known`` names, where it is what AutoTokenizer would resolve here and
    now (same transformers, same files, a class of transformers itself), else None."""
    if known is None or not known.class_path.startswith("transformers."):
        return None
    if known.transformers != engine_versions(("transformers",))["transformers"] \
            or known.files != folder_digest(model_path):
        return None
    module, _, name = known.class_path.partition(":")
    try:
        kind = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):  # a class this transformers does not have
        return None
    from transformers.tokenization_utils_base import PreTrainedTokenizerBase

    # an edited certificate naming a model class would load weights through it
    return kind if isinstance(kind, type) and issubclass(kind, PreTrainedTokenizerBase) \
        else None


def load_tokenizer(model_path: str | Path, known: TokenizerIdentity | None = None) -> Any:
    """The folder's tokenizer as ``AutoTokenizer.from_pretrained`` returns it; through
    ``known``'s class when that is the one AutoTokenizer would pick (module docstring)."""
    path = Path(model_path)
    kind = _known_class(known, path)
    if kind is not None:
        # the arguments AutoTokenizer passes on to the class it resolved
        return kind.from_pretrained(str(path), local_files_only=True, _from_auto=True)
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path), local_files_only=True)


__all__ = ["TokenizerIdentity", "folder_digest", "identify", "load_tokenizer", "resolve"]
