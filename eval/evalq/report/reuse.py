"""What a variant reused instead of encoding (issue 31), in words for every report.

A candidate with ``documents: reference`` was searched against the reference's document
vectors, one with a vector file against vectors from disk that were probed first. The
reader of a verdict must see that: a pass certifies the queries' engine against the kept
index, not a re-encoded corpus. Read from the summary's ``encode`` parts; nothing is
recomputed.
"""

from __future__ import annotations

from evalq.report.runview import RunView
from evalq.results.schema import EncodeSection, VectorProbe


def probe_text(probe: VectorProbe) -> str:
    """One line: the file matched today's stack at the stated tolerance."""
    norms = ("" if probe.max_norm_difference is None else
             f", norms within {probe.max_norm_difference:.2%} (tolerance "
             f"{probe.norm_tolerance:.2%})")
    return (f"the vectors in {probe.file} match today's stack at cosine ≥ "
            f"{probe.min_cosine:g} (lowest {probe.lowest_cosine:.6f}, mean "
            f"{probe.mean_cosine:.6f} over {probe.texts} sampled {probe.side} of {probe.rows}, "
            f"seed {probe.seed}{norms})")


def reuse_text(encode: EncodeSection) -> str | None:
    """``documents reused from variant fp32`` (and the probe), or None: nothing reused."""
    sides = encode.reused.model_dump(exclude_none=True) if encode.reused is not None else {}
    if not sides:
        return None
    text = "; ".join(f"{side} reused from {source} (not encoded)"
                     for side, source in sorted(sides.items()))
    for probe in (encode.probe, encode.query_probe):
        if probe is not None:
            text += "; " + probe_text(probe)
    return text


def reuse_notes(run: RunView) -> list[str]:
    """``<variant> on <dataset>: ...`` for every variant that reused a side."""
    notes = []
    for ds in run.datasets:
        for name in run.variants:
            entry = run.entry(ds, name)
            text = reuse_text(entry.encode) if entry is not None else None
            if text:
                notes.append(f"{name} on {ds}: {text}")
    return notes
