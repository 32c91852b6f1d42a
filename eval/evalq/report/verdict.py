"""Which candidates may ship, which failed and why, which are undecided or ungated, and
the recommendation: the cheapest candidate that passed every gate that applies to it and
had at least one (an ungated candidate is never recommended).

Read from the stored gate verdicts and cost figures (weight bytes, index bytes, encode
throughput); nothing is re-decided here. Every report (HTML, markdown, console) takes its
verdict from these functions, so they never disagree about what may ship.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from evalq.core.gates import stored_verdict
from evalq.report.runview import RunView, finite
from evalq.results.schema import (
    EncodeFigures,
    EncodeStats,
    GateCheck,
    IndexRecord,
    RunSummary,
)

Status = Literal["ship", "fail", "inconclusive", "ungated", "not run", "no verdict"]

# summary.json's per-candidate verdict -> the reports' status
_STATUS: dict[str, Status] = {"pass": "ship", "fail": "fail", "inconclusive": "inconclusive",
                              "ungated": "ungated"}
SUITE = "all datasets"  # the dataset a pooled or parity check is reported under

COST_LABELS = {"weight_bytes": "weight bytes", "index_bytes": "index bytes",
               "throughput": "encode throughput"}


@dataclass(frozen=True)
class Costs:
    """What a variant costs to serve. ``throughput`` (document texts per second while
    encoding) is ``None`` when every chunk came from the cache (nothing was timed)."""

    weight_bytes: float | None
    index_bytes: float | None
    throughput: float | None
    peak_rss_mb: float | None
    # What one stored vector is: width × element ("64d int8"), so a table of Matryoshka
    # dims × output quantizations reads as such; None without an index record.
    index_layout: str | None = None
    # The variant whose timed encoding ``throughput`` is, when not this one's: a candidate
    # that changes only its output vectors reuses another variant's embeddings (the same
    # encoder fingerprint) and was never timed itself.
    throughput_of: str | None = None
    # Where a variant that encoded no document took them from (issue 31: ``documents:``),
    # e.g. "variant fp32": it has no document throughput of its own.
    documents_from: str | None = None

    def throughput_text(self) -> str:
        """docs/s as a table shows it: ``"cached"`` when nothing was timed, the encoder's
        own variant named when the figure is another variant's (``"11.0 (fp32)"``)."""
        if self.documents_from is not None:
            return f"reused ({self.documents_from.removeprefix('variant ')})"
        if self.throughput is None:
            return "cached"
        own = f"{self.throughput:.1f}"
        return f"{own} ({self.throughput_of})" if self.throughput_of else own

    def get(self, key: str) -> float | None:
        value: float | None = getattr(self, key)
        return value

    def index_text(self) -> str:
        """Index bytes with the layout, KiB under a MiB (a slice's index is small)."""
        if self.index_bytes is None:
            return "—"
        size = (f"{self.index_bytes / 2**20:.1f} MiB" if self.index_bytes >= 2**20
                else f"{self.index_bytes / 2**10:.1f} KiB")
        return f"{size} ({self.index_layout})" if self.index_layout else size


@dataclass(frozen=True)
class Failure:
    dataset: str
    gate: str
    verdict: str
    reason: str


@dataclass(frozen=True)
class CandidateVerdict:
    name: str
    status: Status
    failures: tuple[Failure, ...]
    queries_needed: int | None  # the most any inconclusive gate asks for


@dataclass(frozen=True)
class Recommendation:
    variant: str | None
    cost_key: str
    text: str


def costs(run: RunView, variant: str) -> Costs:
    """Cost figures as stored: weights from the manifest's quantization record, index
    bytes summed over datasets, throughput from the stored encode counters."""
    info = run.summary_variant(variant)
    recorded = run.manifest_variant(variant)
    quant = run.backend(variant).quantization_record
    weight = finite(info.weight_bytes if info else None) or finite(
        quant.weight_bytes if quant is not None else None)
    index_total = 0.0
    any_index = False
    layout = None
    for ds in run.datasets:
        entry = run.entry(ds, variant)
        stored = entry.index_record if entry is not None and entry.index else None
        index = stored or run.recorded(ds, variant).index or IndexRecord()
        size = finite(index.bytes)
        if size is not None:
            index_total += size
            any_index = True
            layout = layout or index_layout(index)
    rss = finite(info.peak_rss_mb if info else None) or finite(
        recorded.timings_record.peak_rss_mb if recorded else None)
    throughput = timed_throughput(run, variant)
    twin = None if throughput is not None else timed_twin(run, variant)
    if twin is not None:
        throughput = timed_throughput(run, twin)
    return Costs(weight, index_total if any_index else None, throughput, rss, layout, twin,
                 _documents_from(run, variant))


def _documents_from(run: RunView, variant: str) -> str | None:
    """The source of the documents a variant borrowed instead of encoding, if it did."""
    for ds in run.datasets:
        entry = run.entry(ds, variant)
        reused = entry.encode.reused if entry is not None else None
        if reused is not None and reused.documents is not None:
            return reused.documents
    return None


def timed_throughput(run: RunView, variant: str) -> float | None:
    """Documents per second over the encodings this run timed for ``variant`` (None when
    every chunk came from the cache)."""
    texts = seconds = 0.0
    for ds in run.datasets:
        entry = run.entry(ds, variant)
        docs: EncodeStats | EncodeFigures | None = \
            entry.encode.documents if entry is not None else None
        if docs is None:  # not in the summary (an unfinished run): the manifest's record
            encode = run.recorded(ds, variant).encode
            docs = encode.documents if encode is not None else None
        if docs is None:
            continue
        rate, spent = finite(docs.texts_per_s), finite(docs.seconds_computing)
        if rate and spent:
            texts += float(docs.n_computed or docs.texts or 0)
            seconds += spent
    return texts / seconds if seconds > 0 else None


def timed_twin(run: RunView, variant: str) -> str | None:
    """The first other variant with the same encoder fingerprint that encoded in this run
    (timed), or None: whose embeddings an untimed, vectors-only candidate reused."""
    mine = run.backend(variant).fingerprint
    if not mine:
        return None
    for other in run.variants:
        if (other != variant and run.backend(other).fingerprint == mine
                and timed_throughput(run, other) is not None):
            return other
    return None


def index_layout(index: IndexRecord) -> str | None:
    """``"64d int8"`` from a stored index record (None for an ANN index or an old run)."""
    dim, quantize = index.dim, index.quantize
    if dim is None or quantize is None:
        return None
    return f"{dim}d {'float32' if quantize == 'none' else quantize}"


def _checks(run: RunView, name: str) -> list[tuple[str, GateCheck]]:
    """Every stored check of a candidate with the dataset it belongs to: per-dataset
    (sensitivity included), the variant's own (parity preflight, pooled gates) and the
    retriever-stage pipeline gates on it."""
    info = run.summary_variant(name)
    out = [] if info is None else [(SUITE, c) for c in [*(info.suite_checks or []),
                                                        *(info.pipeline_checks or [])]]
    for ds in run.datasets:
        out += [(ds, c) for c in run.gate_checks(ds, name)]
    return out


def _stored_status(run: RunView, name: str, checks: list[tuple[str, GateCheck]]) -> Status:
    info = run.summary_variant(name)
    if run.summary is None:
        return "no verdict"
    # Written before summaries carried a verdict: the same rule, from the stored checks.
    return _STATUS[stored_verdict(info.verdict if info else None,
                                  info.passed if info else None,
                                  [c.model_dump() for _, c in checks])]


def candidate_verdicts(run: RunView) -> list[CandidateVerdict]:
    out = []
    for name in run.candidates:
        if not run.ran(name):
            out.append(CandidateVerdict(name, "not run", (), None))
            continue
        checks = _checks(run, name)
        failures: list[Failure] = []
        needed: list[int] = []
        for ds, check in checks:
            if check.passed:
                continue
            failures.append(Failure(ds, check.gate, check.verdict, check.reason))
            q = check.read_figures.queries_needed
            if check.verdict == "inconclusive" and isinstance(q, int | float):
                needed.append(int(q))
        status = _stored_status(run, name, checks)
        out.append(CandidateVerdict(name, status, tuple(failures) if status in (
            "fail", "inconclusive") else (), max(needed) if needed and status ==
            "inconclusive" else None))
    return out


def _fmt_cost(key: str, value: float | None) -> str:
    if value is None:
        return "unknown"
    if key == "throughput":
        return f"{value:.1f} documents/s"
    if key == "index_bytes" and value < 2**20:  # a slice's index: KiB says something
        return f"{value / 2**10:.1f} KiB"
    return f"{value / 2**20:.1f} MiB"


def recommend(run: RunView, verdicts: list[CandidateVerdict] | None = None) -> Recommendation:
    """The cheapest certified candidate (passed every gate that applies to it and had at
    least one) by the recipe's ``report.cost`` (lower bytes, or higher throughput), ties
    broken by the other two costs. A candidate whose deciding cost is unknown ranks after
    those whose cost is known."""
    key = run.cost_key
    verdicts = candidate_verdicts(run) if verdicts is None else verdicts
    passing = [v.name for v in verdicts if v.status == "ship"]
    label = COST_LABELS.get(key, key)
    if run.summary is None:
        return Recommendation(None, key, "no recommendation: the run did not finish")
    if not passing:
        ungated = [v.name for v in verdicts if v.status == "ungated"]
        if ungated and len(ungated) == len(verdicts):
            return Recommendation(None, key, f"no recommendation: no gate applies to "
                                  f"{', '.join(ungated)} (ungated); add gates to certify a "
                                  f"candidate, or keep serving {run.reference}")
        return Recommendation(None, key, f"no candidate passes every gate: keep serving "
                              f"{run.reference}")
    order = [key] + [k for k in ("weight_bytes", "index_bytes", "throughput") if k != key]

    def rank(name: str) -> tuple[tuple[int, float], ...]:
        c = costs(run, name)
        parts = []
        for k in order:
            value = c.get(k)
            if value is None:
                parts.append((1, 0.0))
            else:
                parts.append((0, -value if k == "throughput" else value))
        return tuple(parts)

    best = min(passing, key=rank)
    mine, ref = costs(run, best), costs(run, run.reference)
    value, ref_value = mine.get(key), ref.get(key)
    versus = ""
    if value is not None and ref_value:
        ratio = value / ref_value
        versus = f" ({ratio:.2f}× the reference's {_fmt_cost(key, ref_value)})"
    return Recommendation(
        best, key,
        f"{best}: the cheapest of {len(passing)} passing candidate"
        f"{'s' if len(passing) != 1 else ''} by {label}, {_fmt_cost(key, value)}{versus}"
        f"{_slower_here(mine.throughput, ref.throughput, key, label)}")


def _slower_here(mine: float | None, ref: float | None, key: str, label: str) -> str:
    """Where the cost is bytes and the recommended candidate encoded slower (``mine``
    documents/s) than the reference (``ref``) in this run, a clause saying so. A
    quantized candidate reads as "faster" to a team choosing for latency, and on some
    CPUs it is not: without VNNI, OpenVINO's int8 encodes at 0.87x fp32
    (docs/benchmarks.md, the x86-64/avx2 record)."""
    if key == "throughput":
        return ""
    if mine is None or not ref or mine >= ref:
        return ""
    return (f"; in this run it encoded at {mine / ref:.2f}× the reference's speed "
            f"({mine:.1f} against {ref:.1f} documents/s): chosen for {label}, not speed")


def gates_word(summary: RunSummary) -> str:
    """The run's one-word gate outcome: ``FAILED``, ``PASSED``, or, when nothing was gated
    (``--only fp32``, or candidates without a gate), ``NOT CHECKED (no candidate gated)``
    rather than a PASSED that no gate decided."""
    if not summary.passed:
        return "FAILED"
    gated = any(v.role == "candidate" and v.passed is not None
                for v in summary.variants.values()) or bool(summary.pipelines)
    return "PASSED" if gated else "NOT CHECKED (no candidate gated)"
