"""`evalq compare RUN_A RUN_B [--markdown]`: what changed between two runs of a recipe
(two commits, two machines, two library versions).

Per dataset, variant and measure, the stored per-query values of B and A are paired by
query id here (:func:`paired_values`); the command computes their paired differences
(:mod:`evalq.execute.compare`) and this module renders the differences it is given, with
the verdicts that changed and the settings, versions and fingerprints that differ.

Two runs are comparable only on the same data: the same datasets with the same
fingerprints and the same query ids. Anything else is refused (exit 2) naming what
differs, because a paired difference over different queries means nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.comparison import MetricDiff, PairedValues
from evalq.core.errors import InputError
from evalq.core.values import PerQuery
from evalq.report.losses import loss_rows, loss_text
from evalq.report.markdown import md
from evalq.report.runview import RunView
from evalq.report.verdict import costs

# Recorded per run but expected to differ between any two runs: not "settings".
_VOLATILE = ("started", "finished", "stopped", "status", "timings", "environment.argv",
             "recipe_file", "schema_version", "error", "datasets", "variants",
             "options.use_cache")


@dataclass(frozen=True)
class VerdictChange:
    dataset: str
    variant: str
    gate: str
    a: str
    b: str


@dataclass(frozen=True)
class SettingDiff:
    key: str
    a: Any
    b: Any


@dataclass(frozen=True)
class CostRow:
    variant: str
    key: str
    a: float | None
    b: float | None


@dataclass(frozen=True)
class LossChange:
    """One measure's model, index or end-to-end loss in both runs (issue 30)."""

    dataset: str
    variant: str
    metric: str
    loss: str
    a: float | None
    b: float | None


@dataclass
class Comparison:
    a: RunView
    b: RunView
    confidence: float
    metrics: list[MetricDiff] = field(default_factory=list)
    verdicts: list[VerdictChange] = field(default_factory=list)
    settings: list[SettingDiff] = field(default_factory=list)
    costs: list[CostRow] = field(default_factory=list)
    only_in_a: list[str] = field(default_factory=list)
    only_in_b: list[str] = field(default_factory=list)
    losses: list[LossChange] = field(default_factory=list)

    @property
    def changed(self) -> list[MetricDiff]:
        return [m for m in self.metrics if m.change in ("higher", "lower", "undefined")]

    @property
    def differing(self) -> list[MetricDiff]:
        return [m for m in self.metrics if m.change != "identical"]

    @property
    def no_differences(self) -> bool:
        return not (self.differing or self.verdicts or self.settings or self.only_in_a
                    or self.only_in_b)


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def _variant_settings(run: RunView, variant: str) -> dict[str, Any]:
    """A variant's settings, backend description and parity record, flattened."""
    info = run.manifest_variant(variant)
    if info is None:
        return {}
    return _flatten({"settings": info.settings, "backend": info.backend,
                     "parity": info.parity})


def _volatile(key: str) -> bool:
    return any(key == v or key.startswith(v + ".") for v in _VOLATILE)


def check_comparable(a: RunView, b: RunView) -> None:
    """Refuse two runs whose data differ (exit 2 naming every difference)."""
    for run in (a, b):
        if run.summary is None:
            raise InputError(message="the run did not finish (no summary.json)",
                             file=run.root, fix="compare finished runs only")
    problems = []
    da, db = set(a.manifest.datasets), set(b.manifest.datasets)
    if da != db:
        problems.append(f"datasets differ: A has {', '.join(sorted(da)) or 'none'}, "
                        f"B has {', '.join(sorted(db)) or 'none'}")
    for ds in sorted(da & db):
        ra, rb = a.dataset_record(ds), b.dataset_record(ds)
        if ra.fingerprint != rb.fingerprint:
            problems.append(f"dataset {ds!r} fingerprint differs: A {ra.fingerprint}, B "
                            f"{rb.fingerprint} (A {ra.queries} queries / {ra.documents} "
                            f"documents, B {rb.queries} / {rb.documents})")
            continue
        qa, qb = _stored(a, ds, a.reference, b), _stored(b, ds, b.reference, a)
        if qa is None or qb is None:
            problems.append(f"dataset {ds!r}: the reference's per-query values are missing "
                            f"in {'A' if qa is None else 'B'}")
            continue
        only_a = sorted(set(qa.query_ids) - set(qb.query_ids))
        only_b = sorted(set(qb.query_ids) - set(qa.query_ids))
        if only_a or only_b:
            problems.append(f"dataset {ds!r}: query sets differ ({len(only_a)} only in A"
                            + (f", e.g. {only_a[0]!r}" if only_a else "")
                            + f"; {len(only_b)} only in B"
                            + (f", e.g. {only_b[0]!r}" if only_b else "") + ")")
    if a.reference != b.reference:
        problems.append(f"the reference variant differs: A {a.reference!r}, B {b.reference!r}")
    if problems:
        raise InputError(message=f"{a.root} and {b.root} are not comparable: "
                         + "; ".join(problems), field="RUN_A RUN_B",
                         fix="compare two runs of the same recipe on the same dataset slice "
                         "(same --max-queries/--max-docs)")


def load_comparable(path_a: str | Path, path_b: str | Path) -> tuple[RunView, RunView]:
    """Both folders, refused unless they are comparable (:func:`check_comparable`)."""
    a, b = RunView.load(path_a), RunView.load(path_b)
    check_comparable(a, b)
    return a, b


def stats_settings(run: RunView) -> dict[str, Any]:
    """The recipe's ``stats`` (confidence, resamples, seed) a comparison uses: A's."""
    return run.recipe.stats.model_dump()


def _both(a: RunView, b: RunView) -> list[str]:
    return [v for v in a.variants if a.ran(v) and b.ran(v)]


def _stored(run: RunView, ds: str, variant: str, other: RunView) -> PerQuery | None:
    """A variant's per-query values on a dataset; refused (exit 2 naming the file) when
    either run measured the variant there but this run's file is gone, so that compare
    never calls identical what it could not read."""
    values = run.per_query(ds, variant)
    if values is None and (run.entry(ds, variant) is not None
                           or other.per_query(ds, variant) is not None):
        raise InputError(message="per-query values missing: compare cannot pair this "
                         f"variant's values on {ds!r}",
                         file=run.root / "per_query" / ds / f"{variant}.jsonl",
                         field="RUN_A RUN_B",
                         fix="rerun 'evalq run' into this folder (or restore the file); "
                         "compare only complete runs")
    return values


def _pair(ds: str, variant: str, metric: str, a: RunView, b: RunView) -> PairedValues | None:
    pa, pb = _stored(a, ds, variant, b), _stored(b, ds, variant, a)
    if pa is None or pb is None or (metric not in pa.values and metric not in pb.values):
        return None
    _same_rows(ds, variant, metric, (a, pa), (b, pb))
    row_b = {q: i for i, q in enumerate(pb.query_ids)}
    ids = [q for q in pa.query_ids if q in row_b]
    va = np.array([pa.values[metric][i] for i, q in enumerate(pa.query_ids) if q in row_b],
                  dtype=np.float64)
    vb = np.array([pb.values[metric][row_b[q]] for q in ids], dtype=np.float64)
    return PairedValues(ds, variant, metric, va, vb)


def _same_rows(ds: str, variant: str, metric: str, *sides: tuple[RunView, PerQuery]) -> None:
    """Both files hold ``metric`` for the same queries: a row or a measure missing from
    one was dropped from the pairing, and compare called identical what it never read."""
    for (run, mine), (_, theirs) in ((sides[0], sides[1]), (sides[1], sides[0])):
        missing = sorted(set(theirs.query_ids) - set(mine.query_ids))
        lacks = metric in theirs.values and metric not in mine.values
        if missing or lacks:
            what = (f"no per-query {metric!r}" if lacks else
                    f"no row for {len(missing)} of the other run's queries "
                    f"(e.g. {missing[0]!r})")
            raise InputError(message=f"{what}, so compare cannot pair {variant!r} on {ds!r}",
                             file=run.root / "per_query" / ds / f"{variant}.jsonl",
                             field="RUN_A RUN_B",
                             fix="rerun 'evalq run' into this folder (or restore the file); "
                             "compare complete runs of the same recipe")


def paired_values(a: RunView, b: RunView) -> list[PairedValues]:
    """The stored per-query values of every measure of A's recipe, for every variant both
    runs ran, paired by query id (dataset, variant, measure order)."""
    measures = list(dict.fromkeys([*a.recipe.metrics, *a.recipe.reference_metrics]))
    out = []
    for ds in a.datasets:
        for v in _both(a, b):
            for m in measures:
                pair = _pair(ds, v, m, a, b)
                if pair is not None:
                    out.append(pair)
    return out


def comparison(a: RunView, b: RunView, metrics: list[MetricDiff]) -> Comparison:
    """The comparison of two comparable runs around the paired differences the command
    computed: verdicts that changed, settings that differ, costs side by side."""
    out = Comparison(a=a, b=b, confidence=a.confidence, metrics=metrics)
    out.only_in_a = [v for v in a.variants if a.ran(v) and not b.ran(v)]
    out.only_in_b = [v for v in b.variants if b.ran(v) and not a.ran(v)]
    both = _both(a, b)
    for ds in a.datasets:
        for v in both:
            checks_a = {c.gate: c.verdict for c in a.gate_checks(ds, v)}
            checks_b = {c.gate: c.verdict for c in b.gate_checks(ds, v)}
            for gate in dict.fromkeys([*checks_a, *checks_b]):
                va, vb = checks_a.get(gate, "absent"), checks_b.get(gate, "absent")
                if va != vb:
                    out.verdicts.append(VerdictChange(ds, v, str(gate), str(va), str(vb)))
    fa = _flatten(a.manifest.model_dump(exclude_unset=True))
    fb = _flatten(b.manifest.model_dump(exclude_unset=True))
    for key in sorted(set(fa) | set(fb)):
        if not _volatile(key) and fa.get(key) != fb.get(key):
            out.settings.append(SettingDiff(key, fa.get(key), fb.get(key)))
    for v in both:
        ma, mb = _variant_settings(a, v), _variant_settings(b, v)
        for key in sorted(set(ma) | set(mb)):
            if ma.get(key) != mb.get(key) and not key.startswith("parity.cosine"):
                out.settings.append(SettingDiff(f"variant {v}: {key}", ma.get(key), mb.get(key)))
        ca, cb = costs(a, v), costs(b, v)
        for key in ("weight_bytes", "index_bytes", "throughput", "peak_rss_mb"):
            out.costs.append(CostRow(v, key, ca.get(key), cb.get(key)))
    out.losses = _losses(a, b)
    return out


def _losses(a: RunView, b: RunView) -> list[LossChange]:
    """The loss split of every (dataset, candidate, measure) both runs stored it for."""
    in_b = {(r.dataset, r.variant, r.metric): r.split for r in loss_rows(b)}
    out = []
    for row in loss_rows(a):
        other = in_b.get((row.dataset, row.variant, row.metric))
        if other is None:
            continue
        out += [LossChange(row.dataset, row.variant, row.metric, loss,
                           getattr(row.split, loss), getattr(other, loss))
                for loss in ("model", "index", "end_to_end")]
    return out


# -- rendering ---------------------------------------------------------------------------

def _num(value: float) -> str:
    return "nan" if not math.isfinite(value) else f"{value:.4f}"


def _signed(value: float) -> str:
    return "nan" if not math.isfinite(value) else f"{value:+.4f}"


def _cost(key: str, value: float | None) -> str:
    if value is None:
        return "—"
    if key in ("weight_bytes", "index_bytes"):
        return f"{value / 2**20:.1f} MiB"
    if key == "peak_rss_mb":
        return f"{value:.0f} MiB"
    return f"{value:.1f}/s"


def _ratio(a: float | None, b: float | None) -> str:
    return f"{b / a:.2f}×" if a and b is not None else "—"


def _short(value: Any, limit: int = 40) -> str:
    text = str(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _headline(c: Comparison) -> str:
    if c.no_differences:
        return "no differences: every stored per-query value, verdict and setting is identical"
    return (f"{len(c.changed)} of {len(c.metrics)} figures changed beyond noise, "
            f"{len(c.differing) - len(c.changed)} moved within noise; "
            f"{len(c.verdicts)} verdict(s) changed; {len(c.settings)} setting(s) differ")


def _fingerprint(run: RunView, ds: str) -> str:
    return str(run.dataset_record(ds).fingerprint)[:19]


def render_text(c: Comparison) -> str:
    """Plain text for a terminal (fits 100 columns)."""
    conf = f"{c.confidence * 100:g}%"
    lines = [f"evalq compare · {c.a.name}",
             f"  A {c.a.label}  {c.a.root}", f"  B {c.b.label}  {c.b.root}",
             "comparable: same datasets (" + ", ".join(
                 f"{ds} {_fingerprint(c.a, ds)}" for ds in c.a.datasets) + ") and query ids",
             "",
             _headline(c), ""]
    shown = c.differing
    if shown:
        lines.append(f"{'variant':16} {'measure':12} {'A':>8} {'B':>8} {'B − A':>8} "
                     f"{conf + ' CI':>19} {'p':>6}  change")
        for m in shown:
            name = m.variant if len(c.a.datasets) == 1 else f"{m.dataset}/{m.variant}"
            lines.append(f"{_short(name, 16):16} {_short(m.metric, 12):12} {_num(m.a):>8} "
                         f"{_num(m.b):>8} {_signed(m.delta):>8} "
                         f"[{_signed(m.ci_low)},{_signed(m.ci_high)}] "
                         f"{m.p_value:6.3f}  {m.change}")
        lines.append("")
    for v in c.verdicts:
        lines.append(f"verdict changed: {v.variant} · {v.gate}: {v.a} → {v.b}")
    for name in c.only_in_a:
        lines.append(f"only in A: variant {name}")
    for name in c.only_in_b:
        lines.append(f"only in B: variant {name}")
    if c.settings:
        lines.append("settings, versions and fingerprints that differ (A → B):")
        lines += [f"  {s.key}: {_short(s.a)} → {_short(s.b)}" for s in c.settings]
    if c.losses:
        lines.append("")
        lines.append(f"{'losses':16} {'measure':12} {'loss':10} {'A':>8} {'B':>8}")
        lines += [f"{_short(x.variant, 16):16} {_short(x.metric, 12):12} {x.loss:10} "
                  f"{loss_text(x.a):>8} {loss_text(x.b):>8}" for x in c.losses]
    lines.append("")
    lines.append(f"{'costs':16} {'':12} {'A':>10} {'B':>10} {'B/A':>6}")
    for row in c.costs:
        lines.append(f"{_short(row.variant, 16):16} {row.key:12} {_cost(row.key, row.a):>10} "
                     f"{_cost(row.key, row.b):>10} {_ratio(row.a, row.b):>6}")
    return "\n".join(lines) + "\n"


def render_markdown(c: Comparison) -> str:
    """A pull-request comment."""
    conf = f"{c.confidence * 100:g}%"
    icon = "✅" if c.no_differences else ("⚠️" if c.changed or c.verdicts else "ℹ️")
    lines = [f"### evalq compare · {md(c.a.name)}", "",
             f"A `{md(c.a.label)}` → B `{md(c.b.label)}`", "", f"{icon} {md(_headline(c))}", ""]
    if c.verdicts:
        lines += ["| variant | gate | A | B |", "|---|---|---|---|"]
        lines += [f"| {md(v.variant)} | {md(v.gate)} | {md(v.a)} | **{md(v.b)}** |"
                  for v in c.verdicts]
        lines.append("")
    if c.differing:
        lines += [f"| variant | measure | A | B | B − A [{conf} CI] | p | change |",
                  "|---|---|---:|---:|---:|---:|---|"]
        for m in c.differing:
            change = f"**{m.change}**" if m.change in ("higher", "lower", "undefined") \
                else m.change
            name = m.variant if len(c.a.datasets) == 1 else f"{m.dataset}/{m.variant}"
            lines.append(f"| {md(name)} | {md(m.metric)} | {_num(m.a)} | {_num(m.b)} | "
                         f"{_signed(m.delta)} [{_signed(m.ci_low)}, {_signed(m.ci_high)}] | "
                         f"{m.p_value:.3f} | {change} |")
        lines.append("")
    if c.only_in_a or c.only_in_b:
        lines += [f"Only in A: {md(', '.join(c.only_in_a) or '—')}; only in B: "
                  f"{md(', '.join(c.only_in_b) or '—')}", ""]
    if c.settings:
        lines += [f"<details><summary>{len(c.settings)} setting(s), version(s) or "
                  "fingerprint(s) differ</summary>", "", "| key | A | B |", "|---|---|---|"]
        lines += [f"| {md(s.key)} | {md(_short(s.a, 60))} | {md(_short(s.b, 60))} |"
                  for s in c.settings]
        lines += ["", "</details>", ""]
    if c.losses:
        lines += ["<details><summary>model loss and index loss</summary>", "",
                  "| variant | measure | loss | A | B |", "|---|---|---|---:|---:|"]
        lines += [f"| {md(x.variant)} | {md(x.metric)} | {x.loss} | {loss_text(x.a)} | "
                  f"{loss_text(x.b)} |" for x in c.losses]
        lines += ["", "</details>", ""]
    lines += ["<details><summary>costs</summary>", "", "| variant | cost | A | B | B/A |",
              "|---|---|---:|---:|---:|"]
    lines += [f"| {md(r.variant)} | {r.key} | {_cost(r.key, r.a)} | {_cost(r.key, r.b)} | "
              f"{_ratio(r.a, r.b)} |" for r in c.costs]
    lines += ["", "</details>"]
    return "\n".join(lines) + "\n"
