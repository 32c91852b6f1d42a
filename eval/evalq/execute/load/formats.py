"""The decision table's format column: what each load-tested variant served, beside its
quality verdict and its knees, so formats are compared at their verdicts.

A server that runs an evalq graph (``load.launch.<v>.onnx_from``) records which one in its
description (``server.launched.served_graph``); a vLLM variant its dtype and quantization;
any other server is named by its backend and the program its launch ran (evalq does not
know the engine inside).
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Any


def served_format(entry: dict[str, Any]) -> str:
    """A short label of what a variant's server ran, from its ``load/summary.json`` entry."""
    server = entry.get("server") or {}
    graph = (server.get("launched") or {}).get("served_graph")
    if graph:
        method = graph.get("quantization") or "none"
        return f"onnx {'fp32' if method == 'none' else method}"
    quant = server.get("quantization")
    method = quant.get("method") if isinstance(quant, dict) else None
    dtype = server.get("dtype")
    label = " ".join(str(p) for p in (entry.get("backend"), dtype) if p)
    if method and method not in ("none", "dtype"):
        label += f" {method}"
    command = (server.get("launched") or {}).get("command")
    return f"{label} ({PurePath(command[0]).name})" if command else label


def decision_lines(decision: list[dict[str, Any]]) -> list[str]:
    """The decision rows as a table: format, verdict, knees, replicas, cost."""
    if not decision:
        return []
    head = (f"{'variant':22s} {'format':22s} {'quality':13s} {'query req/s':>11s} "
            f"{'ingest/s':>9s} {'replicas':>8s} {'$/1M q':>8s}")
    lines = [head, "-" * len(head)]
    for row in decision:
        knees = row.get("knees") or {}

        def knee(kind: str, knees: dict[str, Any] = knees) -> str:
            k = knees.get(kind) or {}
            if k.get("per_s") is None:
                return "-"
            return f"{'>=' if k.get('lower_bound') else ''}{k['per_s']:.1f}"

        dollars = row.get("dollars_per_million_queries")
        replicas = row.get("replicas") if row.get("feasible") else "infeasible"
        lines.append(f"{row['variant']:22s} {row.get('format') or '-':22s} "
                     f"{row['quality']:13s} {knee('query'):>11s} {knee('ingest'):>9s} "
                     f"{replicas!s:>8s} {'-' if dollars is None else f'{dollars:.2f}':>8s}")
    return lines


__all__ = ["decision_lines", "served_format"]
