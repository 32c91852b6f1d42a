"""``evalq metrics QRELS RUN``: score a TREC run file against qrels, like trec_eval.

The text output follows trec_eval's ``measure<TAB>query<TAB>value`` lines (``all`` for the
mean over every query of the qrels), so scripts that parse trec_eval output keep working;
measures are named the evalq way (``nDCG@10``). ``--json`` gives full-precision values
for machines. The mean is over every query of the qrels (a query the run missed counts
0, like ``trec_eval -c``); how many that were is reported, never hidden.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from pathlib import Path

from evalq.data.trec import read_qrels, read_run
from evalq.measure.judged import evaluate_dict
from evalq.measure.measures import parse_measures

DEFAULT_MEASURES: tuple[str, ...] = ("nDCG@10", "R@100", "RR@10", "AP@100", "P@10")


def metrics_report(
    qrels_path: str | Path,
    run_path: str | Path,
    measures: Sequence[str] | None = None,
    per_query: bool = False,
    as_json: bool = False,
) -> str:
    """Evaluate ``run_path`` against ``qrels_path`` and return the printable report.

    ``measures`` are strings such as ``nDCG@10`` or ``ndcg_cut_10`` (default
    :data:`DEFAULT_MEASURES`). Bad files or measure names raise
    :class:`~evalq.core.errors.InputError` (exit 2 in the CLI). Queries of the run that the
    qrels do not judge are ignored, with a warning.
    """
    parsed = parse_measures(list(measures) if measures else list(DEFAULT_MEASURES))
    qrels = read_qrels(qrels_path)
    run = read_run(run_path)
    values = evaluate_dict(run, qrels, parsed)
    judged = set(qrels.judgments)
    missing = sum(1 for q in qrels.judgments if q not in run)
    unjudged = sum(1 for q in run if q not in judged)
    if missing:
        warnings.warn(
            f"{missing} of {len(judged)} qrels queries have no results in {run_path}; "
            "they score 0",
            stacklevel=2,
        )
    if unjudged:
        warnings.warn(
            f"{unjudged} run queries have no judgments in {qrels_path}; they are ignored",
            stacklevel=2,
        )
    names = [m.name for m in parsed]
    if as_json:
        doc: dict[str, object] = {
            "qrels": str(qrels_path),
            "run": str(run_path),
            "num_q": len(values.query_ids),
            "num_q_missing_from_run": missing,
            "num_q_unjudged_ignored": unjudged,
            "measures": {name: values.mean(name) for name in names},
        }
        if per_query:
            doc["per_query"] = {
                name: dict(zip(values.query_ids, values.values[name].tolist(), strict=True))
                for name in names
            }
        return json.dumps(doc, indent=2)
    width = max(len(n) for n in [*names, "num_q"])
    lines: list[str] = []
    if per_query:
        for name in names:
            lines.extend(
                f"{name:<{width}}\t{qid}\t{value:.4f}"
                for qid, value in zip(values.query_ids, values.values[name].tolist(),
                                      strict=True)
            )
    lines.append(f"{'num_q':<{width}}\tall\t{len(values.query_ids)}")
    lines.extend(f"{name:<{width}}\tall\t{values.mean(name):.4f}" for name in names)
    return "\n".join(lines) + "\n"
