"""A finished grid search's ``summary.json`` and ``manifest.json``, written by hand: the
report's search sections are tested against the typed ``search`` part (the contract
between the search's executor and the reports) without running a grid."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from evalq.results.schema import SCHEMA_VERSION, parse_summary
from support.summaries import check, summary

HOSTILE = "<img src=x onerror=window.__xss=1>"


def _point(name: str, weights: str, vectors: str, dims: int, cost: float,
           quality: float | None, explore: str, mark: str, alpha: float | None = None,
           reasons: list[str] | None = None) -> dict[str, Any]:
    return {"name": name, "weights": weights, "vectors": vectors, "dims": dims,
            "cost": cost, "quality": quality, "explore": explore, "mark": mark,
            "alpha": alpha, "reasons": reasons or []}


def search_part(recommendation: str | None = "int8-w/int8/384") -> dict[str, Any]:
    """Six points over 2 weights × 3 vectors (one dims): two certified (one on the frontier
    and cheapest, the recommendation), one failed, one inconclusive, two pruned."""
    points = [
        _point("fp32/none/384", "fp32", "none", 384, 1536.0, 0.512, "pass", "not confirmed"),
        _point("fp32/int8/384", "fp32", "int8", 384, 384.0, 0.509, "pass", "certified",
               0.0125),
        _point("int8-w/int8/384", "int8-w", "int8", 384, 380.0, 0.507, "pass", "certified",
               0.00833),
        _point("int8-w/binary+rescore10/384", "int8-w", "binary+rescore10", 384, 48.0, 0.498,
               "inconclusive", "inconclusive", 0.00625,
               ["nDCG@10 vs qrels max_drop 1%: inconclusive"]),
        _point(HOSTILE, "int8-w", "binary", 384, 48.0, 0.430, "pass", "failed", 0.00625,
               ["nDCG@10 vs qrels max_drop 1%: Δ=-0.08 past the margin"]),
        _point("fp32/binary/384", "fp32", "binary", 384, 50.0, 0.420, "fail",
               "not confirmed"),
    ]
    points[1]["recall_at_10"] = 0.9875  # int8 codes against exact float search
    if recommendation is None:
        for p in points:
            if p["mark"] == "certified":
                p["mark"] = "inconclusive"
    frontier = ["int8-w/binary+rescore10/384", "int8-w/int8/384", "fp32/int8/384",
                "fp32/none/384"]
    for p in points:
        p["frontier"] = p["name"] in frontier
    return {"axes": {"weights": ["fp32", "int8-w"],
                     "vectors": ["none", "int8", "binary", "binary+rescore10"],
                     "dims": ["384"]},
            "cost": "index_bytes", "quality": "nDCG@10", "alpha": 0.025,
            "correction": "holm", "survivors": 4,
            "split": {"seed": 7, "explore_fraction": 0.5, "explore_queries": 150,
                      "confirm_queries": 150},
            "points": points, "frontier": frontier, "recommendation": recommendation,
            "encodings": 2, "minimum_encodings": 2}


def search_summary(recommendation: str | None = "int8-w/int8/384") -> dict[str, Any]:
    data = summary({"fp32": {"role": "reference", "passed": True},
                    "int8-w": {"role": "candidate", "passed": True}},
                   gates={"int8-w": [check("pass")]})
    data["search"] = search_part(recommendation)
    parse_summary(data, __file__)  # type: ignore[arg-type]
    return data


def search_manifest() -> dict[str, Any]:
    return {"schema_version": SCHEMA_VERSION, "status": "finished",
            "started": "2026-12-06T23:00:00+00:00",
            "datasets": {"pydocs": {"queries": 300, "documents": 1000}}}


def write_search_folder(root: Path, recommendation: str | None = "int8-w/int8/384") -> Path:
    """A results folder holding only the manifest and the summary (enough for a report)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "manifest.json").write_text(json.dumps(search_manifest()), encoding="utf-8")
    (root / "summary.json").write_text(json.dumps(search_summary(recommendation)),
                                       encoding="utf-8")
    return root
