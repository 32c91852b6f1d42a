"""Loading a transformers encoder for inference, shared by every quantization method.

One place decides how weights are loaded (offline, eval mode, attention implementation,
device placement) so that methods differ only in what they do to the weights, and a
reference and its candidates never differ by an accident of loading.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalq.core.errors import InputError
from evalq.core.values import FLOAT_DTYPES

if TYPE_CHECKING:
    import torch


#: Attention kernel used for every in-process model. PyTorch's fused SDPA matches the eager
#: implementation to float rounding (max |diff| 1.3e-7 on MiniLM) and is what
#: sentence-transformers gets by default. Measured on the 2-core CI machine (96 pydocs
#: texts, batches of 32, best of 4): sdpa 7.9 s, eager 14.4 s. ``torch.compile(dynamic=True)``
#: gave 7.3 s after a 75 s warm-up, within noise of sdpa, so it is not used.
ATTN_IMPLEMENTATION = "sdpa"


# Which transformers auto class ``load_automodel`` builds: ``AutoModel`` (an encoder's
# hidden states) unless a caller asks for another head, e.g. a reranker's
# ``AutoModelForSequenceClassification``. A context variable, so every quantization method
# loads rerankers through the same code path as embedding models without a new parameter.
_AUTO_CLASS: ContextVar[str] = ContextVar("evalq_auto_class", default="AutoModel")


@contextmanager
def auto_class(name: str) -> Iterator[None]:
    """Within the block, ``load_automodel`` builds ``transformers.<name>``."""
    token = _AUTO_CLASS.set(name)
    try:
        yield
    finally:
        _AUTO_CLASS.reset(token)


def torch_dtype(name: str) -> torch.dtype:
    import torch

    if name not in FLOAT_DTYPES:
        raise InputError(
            message=f"unknown dtype '{name}'", field="dtype",
            fix=f"use one of: {', '.join(FLOAT_DTYPES)}",
        )
    return getattr(torch, name)


def check_device(device: str) -> str:
    """Refuse a device this machine lacks, before minutes are spent loading."""
    import torch

    kind = device.split(":", 1)[0]
    if kind == "cpu":
        return device
    if kind == "cuda":
        if not torch.cuda.is_available():
            raise InputError(
                message=f"device '{device}' requested but PyTorch sees no CUDA GPU here",
                field="device", fix="use device: cpu, or run on a machine with a GPU",
            )
        return device
    raise InputError(
        message=f"unknown device '{device}'", field="device", fix="use 'cpu' or 'cuda[:N]'",
    )


def load_automodel(model_path: Path, *, dtype: str, device: str, **kwargs: Any) -> torch.nn.Module:
    """``AutoModel.from_pretrained`` offline, in eval mode, on ``device``.

    ``kwargs`` go to ``from_pretrained`` (a ``quantization_config``, ``device_map``). When
    no ``device_map`` is given the model is moved to ``device`` after loading.
    """
    import transformers
    from transformers.utils import logging as hf_logging

    # The per-tensor "Loading weights" bar is noise beside evalq's own progress display.
    hf_logging.disable_progress_bar()
    options: dict[str, Any] = {
        "dtype": torch_dtype(dtype),
        "attn_implementation": ATTN_IMPLEMENTATION,
        "local_files_only": True,
    }
    options.update(kwargs)
    model_class = getattr(transformers, _AUTO_CLASS.get())
    model = model_class.from_pretrained(str(model_path), **options)
    if "device_map" not in kwargs:
        model = model.to(device)
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return model
