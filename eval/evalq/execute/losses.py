"""Model, index and end-to-end loss of a candidate searched through an index (issue 30).

A candidate with an ``index:`` other than exact (a vector database, FAISS ANN) is searched
twice: exactly and through its index. Its per-query values are stored three ways
(:func:`evalq.execute.dataset_scoring.write_loss_views`): its own (the index's run, with
reference measures against the reference's exact run), ``<name>.exact`` and
``<name>.index``. A gate's ``loss:`` picks which pair of them it is decided on, by the one
gate path (:func:`evalq.decide.gate.decide_gates`):

- ``model``: the candidate's exact search against the reference's exact search;
- ``index``: the candidate through its index against its own exact search (reference
  measures such as overlap@10 are then measured against that exact run: recall against
  exact kNN);
- ``end_to_end``: the candidate through its index against the reference's exact search.

A candidate without an index has no index loss (a gate on it does not apply) and its
model loss is its end-to-end loss. The summary's ``losses`` part holds each measure's
three losses, read back from the stored values so ``evalq gate`` recomputes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from evalq.core.gates import GateCheck, GateSpec, VariantGate
from evalq.core.values import PerQuery
from evalq.decide.gate import decide_gates, decide_variant
from evalq.decide.summary_stats import column
from evalq.measure.registry import parse_measure
from evalq.results import schema as rs
from evalq.results.folder import RunFolder

Pair = tuple[PerQuery, PerQuery]


def loss_pairs(folder: RunFolder, dataset: str, name: str, values: PerQuery,
               ref_values: PerQuery) -> dict[str, Pair | None]:
    """Per loss, the (candidate, reference) values a gate on it pairs; ``None`` for the
    index loss of a candidate searched exactly."""
    end_to_end = (values, ref_values)
    if not (folder.root / "per_query" / dataset / f"{name}.exact.jsonl").is_file():
        return {"model": end_to_end, "index": None, "end_to_end": end_to_end}
    exact = folder.read_per_query(dataset, f"{name}.exact", like=ref_values)
    index = folder.read_per_query(dataset, f"{name}.index", like=ref_values)
    return {"model": (exact, ref_values), "index": (index, exact), "end_to_end": end_to_end}


def decide_losses(specs: Sequence[GateSpec], pairs: Mapping[str, Pair | None], *,
                  extra_values: Mapping[str, np.ndarray] | None, resamples: int,
                  seed: int) -> VariantGate:
    """Each gate decided on the values of the loss it names (a gate on an index loss the
    candidate does not have is left out). Text cosines (``extra_values``) compare the
    candidate's vectors with the reference's, so an index-loss gate does not see them."""
    checks: list[GateCheck] = []
    for spec in specs:
        pair = pairs[spec.loss]
        if pair is None:
            continue
        extra = None if spec.loss == "index" else extra_values
        checks.extend(decide_gates([spec], pair[0], pair[1], extra_values=extra,
                                   resamples=resamples, seed=seed).checks)
    return decide_variant(checks)


def _mean(values: PerQuery, metric: str) -> float | None:
    found = column(values, metric, parse_measure(metric).name)
    if found is None or not len(found) or not np.isfinite(found).all():
        return None
    return float(np.mean(found))


def _drop(high: float | None, low: float | None) -> float | None:
    return None if high is None or low is None else high - low


def loss_split(metrics: Sequence[str], reference_metrics: Sequence[str],
               pairs: Mapping[str, Pair | None]) -> dict[str, rs.LossSplit] | None:
    """Each measure's model, index and end-to-end loss (positive = worse), for a candidate
    searched through an index (``None`` otherwise). A qrels measure's loss is a drop of
    its mean (reference exact − candidate exact, candidate exact − candidate through the
    index, reference exact − candidate through the index); a reference measure's is its
    distance from agreement, 1 − mean, against the run the loss names."""
    index = pairs["index"]
    model, end_to_end = pairs["model"], pairs["end_to_end"]
    if index is None or model is None or end_to_end is None:
        return None
    out: dict[str, rs.LossSplit] = {}
    for m in metrics:
        ref, exact, db = (_mean(model[1], m), _mean(model[0], m), _mean(end_to_end[0], m))
        out[m] = rs.LossSplit(against="qrels", model=_drop(ref, exact), index=_drop(exact, db),
                              end_to_end=_drop(ref, db))
    for m in reference_metrics:
        out[m] = rs.LossSplit(against="reference", model=_drop(1.0, _mean(model[0], m)),
                              index=_drop(1.0, _mean(index[0], m)),
                              end_to_end=_drop(1.0, _mean(end_to_end[0], m)))
    return out
