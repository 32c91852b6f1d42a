"""Two-stage pipelines: first stage top N -> reranker -> top k, with per-stage attribution.

For each pipeline of a recipe and each dataset, after ``evalq run`` has searched the
dense variants:

1. every first-stage variant ranks the corpus (BM25, a dense variant's stored run, or a
   TREC run file) down to the deepest N;
2. every reranker variant, one alive at a time, scores every distinct (query, document)
   pair any first-stage variant proposed (through the score cache, so an interrupted
   pipeline resumes);
3. every (first stage, reranker, N) combination is reranked and scored against qrels and
   against the reference pipeline (first-stage reference -> reranker reference);
4. a candidate combination's change is split into retriever-only (candidate first stage,
   reference reranker), reranker-only (reference first stage, candidate reranker) and
   the interaction (both − retriever-only − reranker-only), each with the paired
   bootstrap CI of the measurement core; the first stage's recall@N stands beside each,
   because a reranker cannot recover what the first stage lost;
5. reranker fidelity (``metrics.fidelity``) compares each candidate reranker's scores to
   the reference reranker's on identical candidate lists (the reference first stage's);
6. cost per stage: pairs/s, seconds and forward passes per query at each N, weight bytes,
   memory; the summary states reranking's cost as the multiplier it is;
7. gates on any stage or on the whole pipeline.

Per-query values and TREC runs of every combination land under
``<results>/pipelines/<pipeline>/`` so they can be re-read and re-scored.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.errors import InputError
from evalq.core.gates import GateSpec, VariantGate
from evalq.core.names import inside
from evalq.core.ranking import Ranking
from evalq.core.values import PerQuery
from evalq.decide.gate import decide_gates
from evalq.decide.summary_stats import (
    StatsSettings,
    align,
    difference_interval,
    gate_confidence,
    mean_entry,
    paired_entry,
)
from evalq.encode.composition import reranker_batch_dependent
from evalq.encode.pairs import (
    build_reranker,
    dense_layout,
    describe_stats,
    resolve_reranker_model,
    score_pairs,
)
from evalq.encode.scorecache import ScoreCache
from evalq.engines.factory import resolve_device
from evalq.engines.quantize import split_spec, validate_quantization
from evalq.execute import given_runs
from evalq.execute.calibration_sample import corpus_calibration
from evalq.execute.memsample import PeakRss
from evalq.measure.fidelity import ScorePair, evaluate_fidelity, pooled_drift
from evalq.measure.judged import evaluate as evaluate_qrels
from evalq.measure.reference import evaluate_reference
from evalq.measure.registry import parse_measure, parse_measures
from evalq.plan.gates import gate_spec
from evalq.plan.pipelines import PipelineGate, PipelineSpec
from evalq.plan.types import Plan
from evalq.results.folder import RunFolder
from evalq.retrieve import firststage
from evalq.retrieve.firststage import Bm25Options, FirstStageRun
from evalq.retrieve.registry import INDEX_KINDS

log = logging.getLogger(__name__)


@dataclass
class PipelineOutcome:
    manifest: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    passed: bool = True
    failed_gates: list[str] = field(default_factory=list)


def combo_name(first_stage: str, reranker: str, depth: int) -> str:
    return f"{first_stage}+{reranker}@{depth}"


def candidate_lists(ranking: Ranking, query_ids: tuple[str, ...], depth: int) -> np.ndarray:
    """``(len(query_ids), depth)`` document indices of each query's top ``depth`` (-1 pad);
    a query the first stage did not answer gets an empty list."""
    out = np.full((len(query_ids), depth), -1, dtype=np.int64)
    row_of = {q: i for i, q in enumerate(ranking.query_ids)}
    take = min(depth, ranking.depth)
    for i, q in enumerate(query_ids):
        r = row_of.get(q)
        if r is not None:
            out[i, :take] = ranking.indices[r, :take]
    return out


def rerank(query_ids: tuple[str, ...], doc_ids: tuple[str, ...], docs: np.ndarray,
           scores: np.ndarray, cutoff: int) -> Ranking:
    """Order each row's candidates by reranker score (trec_eval order), keep ``cutoff``."""
    masked = np.where(docs >= 0, scores, -np.inf)
    order = np.argsort(-masked, axis=1, kind="stable")
    idx = np.take_along_axis(docs, order, axis=1)
    sc = np.take_along_axis(np.where(docs >= 0, scores, np.nan), order, axis=1)
    full = Ranking.from_search(query_ids, doc_ids, idx, sc)
    return Ranking(full.query_ids, full.doc_ids, full.indices[:, :cutoff].copy(),
                   full.scores[:, :cutoff].copy())


def gather(pairs: np.ndarray, flat: np.ndarray, docs: np.ndarray, n_docs: int) -> np.ndarray:
    """Scores of ``docs`` (``(Q, N)`` indices, -1 pad) from the scored ``pairs`` (sorted
    unique ``(query_row, doc)`` rows) and their ``flat`` scores; NaN where padded."""
    keys = pairs[:, 0] * n_docs + pairs[:, 1]
    wanted = np.arange(docs.shape[0])[:, None] * n_docs + np.maximum(docs, 0)
    pos = np.clip(np.searchsorted(keys, wanted), 0, max(len(keys) - 1, 0))
    if len(keys) == 0:
        return np.full(docs.shape, np.nan)
    return np.where(docs >= 0, flat[pos], np.nan)


def attribution(ref: np.ndarray, retriever: np.ndarray, reranker: np.ndarray,
                both: np.ndarray, s: StatsSettings, confidence: float | None = None
                ) -> dict[str, Any]:
    """Per-query paired split of ``both − ref`` into its parts; the deltas add up exactly:
    total = retriever + reranker + interaction. Every part's interval is the recipe's
    method at ``confidence`` (default the recipe's), as the Δ columns and gates use."""
    confidence = s.confidence if confidence is None else confidence
    interaction = both - retriever - reranker + ref
    delta, low, high = difference_interval(interaction, s, confidence)
    return {"total": paired_entry(both, ref, s, confidence),
            "retriever_only": paired_entry(retriever, ref, s, confidence),
            "reranker_only": paired_entry(reranker, ref, s, confidence),
            "interaction": {"delta": delta, "ci_low": low, "ci_high": high}}


def _memory_figures(figures: dict[str, Any]) -> dict[str, Any]:
    return {"peak_rss_mb": figures["peak_rss_mb"], "peak_rss_method": figures["peak_rss_method"]}


def run_pipelines(plan: Plan, recipe_path: Path, datasets: list[Any], out_dir: Path,
                  judged: dict[str, Any], variant_records: dict[str, Any],
                  embedding_cache: Any = None) -> PipelineOutcome:
    """Every pipeline of ``plan`` on every dataset (called by ``runner`` after the
    embedding variants ran; ``variant_records`` is the manifest's per-variant entries,
    ``embedding_cache`` the run's, which bi-encoder scorers embed through)."""

    outcome = PipelineOutcome()
    cache = ScoreCache(plan.work_dir / "rerank")
    try:
        for i, spec in enumerate(plan.sections.pipelines):
            result = _run_one(plan, i, spec, recipe_path, datasets, out_dir, judged,
                              variant_records, cache, embedding_cache)
            outcome.manifest[spec.name] = result["manifest"]
            outcome.summary[spec.name] = result["summary"]
            outcome.passed = outcome.passed and result["summary"]["passed"]
            outcome.failed_gates.extend(result["summary"]["failed_gates"])
    finally:
        cache.close()
    return outcome


def _first_stages(spec: PipelineSpec, index: int, plan: Plan, recipe_path: Path, ds: Any,
                  out_dir: Path, variant_records: dict[str, Any]) -> list[FirstStageRun]:
    fs = spec.first_stage
    field_base = f"pipelines.{index}.first_stage"
    texts = ds.corpus.texts_for_encoding(plan.title_separator)
    if fs.kind == "bm25":
        return [firststage.text_first_stage(
            INDEX_KINDS.get(fs.kind), fs.bm25 or Bm25Options(), texts, ds.corpus.ids,
            list(ds.queries.texts), ds.queries.ids, spec.max_depth,
            where=f"{field_base}.bm25")]
    if fs.kind == "run":
        path = Path(fs.run or "")
        if not path.is_absolute():
            path = recipe_path.resolve().parent / path
        return [given_runs.run_file(path, ds.corpus.ids, ds.queries.ids, f"{field_base}.run")]
    names = [fs.reference or plan.sections.reference, *fs.candidates]
    runs = []
    for name in names:
        if name not in variant_records:
            if name == names[0]:
                raise InputError(message=f"the dense first-stage reference '{name}' did not "
                                 "run", field=f"{field_base}.reference",
                                 fix="include it in --only")
            log.info(f"[evalq] pipeline {spec.name}: dense variant {name} did not run "
                     "(--only); skipped")
            continue
        enc = (variant_records[name].get("datasets", {}).get(ds.name, {})
               .get("encode", {}).get("queries", {}))
        per_query = None
        if enc.get("texts_per_s"):
            per_query = 1.0 / enc["texts_per_s"]
        runs.append(given_runs.dense(out_dir / "runs" / ds.name, name, ds.corpus.ids,
                                     per_query))
    return runs


def _run_one(plan: Plan, index: int, spec: PipelineSpec, recipe_path: Path,
             datasets: list[Any], out_dir: Path, judged: dict[str, Any],
             variant_records: dict[str, Any], cache: Any,
             embedding_cache: Any = None) -> dict[str, Any]:
    folder = RunFolder(inside(out_dir, "pipelines", spec.name))
    cache_dir = plan.work_dir
    rr_paths = {
        v.name: resolve_reranker_model(v.model or spec.reranker.model, cache_dir, recipe_path,
                                       f"pipelines.{index}.reranker.model")
        for v in spec.reranker.variants}
    _check_quantization(spec, index, recipe_path)
    manifest: dict[str, Any] = {"first_stage": {}, "rerankers": {}, "datasets": {}}
    summary: dict[str, Any] = {"depths": spec.depths, "cutoff": spec.cutoff,
                               "first_stage": spec.first_stage.model_dump(mode="json"),
                               "reranker_reference": spec.reranker.reference.name,
                               "datasets": {}, "cost": {}}
    failed: list[str] = []
    for ds in datasets:
        if spec.max_depth > len(ds.corpus):
            raise InputError(message=f"depth {spec.max_depth} exceeds the {len(ds.corpus)} "
                             f"documents of dataset {ds.name}", file=recipe_path,
                             field=f"pipelines.{index}.depths",
                             fix=f"use depths <= {len(ds.corpus)} (or raise max_docs)")
        log.info(f"[evalq] pipeline {spec.name} on {ds.name}: first stage "
                 f"{spec.first_stage.label}")
        runs = _first_stages(spec, index, plan, recipe_path, ds, out_dir, variant_records)
        manifest["first_stage"][ds.name] = {r.name: r.record for r in runs}
        qids = ds.queries.ids
        cands = {r.name: candidate_lists(r.ranking, qids, spec.max_depth) for r in runs}
        doc_texts = ds.corpus.texts_for_encoding(plan.title_separator)
        pairs = np.unique(np.concatenate([
            np.stack([np.repeat(np.arange(len(qids)), spec.max_depth), c.ravel()], axis=1)
            for c in cands.values()]), axis=0)
        pairs = pairs[pairs[:, 1] >= 0]
        scores: dict[str, dict[str, np.ndarray]] = {}
        for variant in spec.reranker.variants:
            flat, entry = _score_with(plan, spec, variant, rr_paths[variant.name], ds,
                                      doc_texts, pairs, out_dir, variant_records, cache,
                                      embedding_cache)
            scores[variant.name] = {f: gather(pairs, flat, c, len(ds.corpus))
                                    for f, c in cands.items()}
            manifest["rerankers"].setdefault(variant.name, {"backend": entry.pop("backend"),
                                                            "datasets": {}})
            manifest["rerankers"][variant.name]["datasets"][ds.name] = entry
        ds_summary, ds_failed = _evaluate(plan, spec, ds, runs, cands, scores,
                                          judged[ds.name], folder)
        summary["datasets"][ds.name] = ds_summary
        failed.extend(ds_failed)
        summary["cost"][ds.name] = _cost(spec, runs, manifest["rerankers"], ds.name)
    summary["rerankers"] = {
        name: {"weight_bytes": (e["backend"].get("quantization") or {}).get("weight_bytes"),
               "quantization": e["backend"].get("quantization"), "kind": spec.reranker.kind,
               "settings": e["backend"].get("settings")}
        for name, e in manifest["rerankers"].items()}
    summary["passed"] = not failed
    summary["failed_gates"] = failed
    if spec.reranker.model.startswith("fixture:") and spec.reranker.kind == "cross-encoder":
        summary["note"] = ("the fixture cross-encoder has an untrained, seeded head: its "
                           "scores measure fidelity, not relevance (quantized vs float32)")
    return {"manifest": manifest, "summary": summary}


def _score_with(plan: Plan, spec: PipelineSpec, variant: Any, model_path: Path, ds: Any,
                doc_texts: list[str], pairs: np.ndarray, out_dir: Path,
                variant_records: dict[str, Any], cache: Any,
                embedding_cache: Any) -> tuple[np.ndarray, dict[str, Any]]:
    """One reranker variant scores every distinct pair (its engine closed before the next
    one starts): the flat scores and its manifest entry for this dataset, with the
    ``backend`` it described."""
    log.info(f"[evalq] pipeline {spec.name}: reranker {variant.name} "
             f"({spec.reranker.kind}, {variant.backend}"
             f"{' ' + variant.dtype if variant.dtype != 'float32' else ''}"
             f"{' ' + variant.quantization['method'] if variant.quantization else ''}) on "
             f"{len(pairs)} pairs")
    began = time.perf_counter()
    device = resolve_device(variant.device)
    with PeakRss() as memory:  # this reranker's own peak, not the process lifetime's
        reranker, tokens, self_batching = build_reranker(
            spec.reranker, variant, model_path, device,
            logs_dir=out_dir / "logs", cache_dir=plan.work_dir,
            embedding_cache=embedding_cache,
            layout=dense_layout([v.options for v in plan.variants], variant_records, ds,
                                plan.title_separator, plan.limits.cache_chunk),
            calibration=corpus_calibration([ds], plan.title_separator))
        try:
            startup_s = time.perf_counter() - began
            flat, score_stats = score_pairs(
                reranker, [ds.queries.texts[q] for q in pairs[:, 0]],
                [doc_texts[d] for d in pairs[:, 1]], cache=cache,
                batch_tokens=tokens, chunk_size=spec.cache_chunk,
                self_batching=self_batching,
                batch_dependent=reranker_batch_dependent(variant))
            described = reranker.describe()
        finally:
            reranker.close()
    return flat, {"backend": described, "scoring": describe_stats(score_stats),
                  "startup_s": startup_s, **_memory_figures(memory.figures())}


def _check_quantization(spec: PipelineSpec, index: int, recipe_path: Path) -> None:
    for j, v in enumerate(spec.reranker.variants):
        if v.quantization is None:
            continue
        method, params = split_spec(v.quantization)
        try:
            validate_quantization(method, params)
        except InputError as exc:
            where = "reference" if j == 0 else f"candidates.{j - 1}"
            raise InputError(message=exc.message, file=recipe_path,
                             field=f"pipelines.{index}.reranker.{where}.{exc.field}",
                             fix=exc.fix) from None


def _evaluate(plan: Plan, spec: PipelineSpec, ds: Any, runs: list[FirstStageRun],
              cands: dict[str, np.ndarray], scores: dict[str, dict[str, np.ndarray]],
              judged: Any, folder: RunFolder) -> tuple[dict[str, Any], list[str]]:
    s = plan.sections.stats
    qids, doc_ids = ds.queries.ids, ds.corpus.ids
    f0, r0 = runs[0].name, spec.reranker.reference.name
    fs_names = [r.name for r in runs]
    rr_names = [v.name for v in spec.reranker.variants]
    measures = parse_measures(spec.metrics)
    ref_measures = parse_measures(spec.reference_metrics)
    fid_measures = parse_measures(spec.fidelity_metrics)
    names = [m.name for m in measures]
    out: dict[str, Any] = {"queries": len(qids), "depths": {}}
    failed: list[str] = []
    for depth in spec.depths:
        recall = parse_measure(f"R@{depth}")
        fs_entry = {}
        fs_recall: dict[str, np.ndarray] = {}
        for run in runs:
            cut = Ranking(run.ranking.query_ids, run.ranking.doc_ids,
                          run.ranking.indices[:, :depth], run.ranking.scores[:, :depth])
            values = evaluate_qrels(cut, judged, [recall, *measures])
            fs_recall[run.name] = values.values[recall.name]
            fs_entry[run.name] = {recall.name: mean_entry(values.values[recall.name], s),
                                  **{m: mean_entry(values.values[m], s) for m in names}}
        per_combo: dict[tuple[str, str], dict[str, np.ndarray]] = {}
        rankings: dict[tuple[str, str], Ranking] = {}
        for f in fs_names:
            for r in rr_names:
                ranking = rerank(qids, doc_ids, cands[f][:, :depth], scores[r][f][:, :depth],
                                 spec.cutoff)
                rankings[(f, r)] = ranking
                values = evaluate_qrels(ranking, judged, measures)
                per_combo[(f, r)] = dict(values.values)
                judged_ids = values.query_ids
                folder.write_run(ds.name, combo_name(f, r, depth), ranking)
        ref_key = (f0, r0)
        combos: dict[str, Any] = {}
        fidelity: dict[str, Any] = {}
        for r in rr_names[1:]:
            pair = ScorePair(qids, cands[f0][:, :depth], scores[r0][f0][:, :depth],
                             scores[r][f0][:, :depth], doc_ids)
            fid = evaluate_fidelity(pair, fid_measures)
            fidelity[r] = {"measures": {m.name: mean_entry(fid.values[m.name], s)
                                        for m in fid_measures},
                           "drift": pooled_drift(pair), "first_stage": f0}
            per_combo[(f0, r)].update(align(fid, judged_ids))
        for (f, r), columns in per_combo.items():
            kind = ("reference" if (f, r) == ref_key else "retriever" if r == r0
                    else "reranker" if f == f0 else "both")
            if (f, r) != ref_key and ref_measures:
                agreement = evaluate_reference(rankings[(f, r)], rankings[ref_key], ref_measures)
                columns.update(align(agreement, judged_ids))
            name = combo_name(f, r, depth)
            folder.write_per_query(ds.name, name, PerQuery(judged_ids, columns))
            entry: dict[str, Any] = {
                "first_stage": f, "reranker": r, "depth": depth, "kind": kind,
                "first_stage_recall": mean_entry(fs_recall[f], s),
                "metrics": {m: mean_entry(columns[m], s) for m in names}}
            if kind != "reference":
                failed.extend(_judge(entry, spec, name, per_combo, (f, r), (f0, r0),
                                     names, ref_measures, s))
            combos[name] = entry
        out["depths"][str(depth)] = {"first_stage": fs_entry, "combinations": combos,
                                     "fidelity": fidelity,
                                     "reference": combo_name(f0, r0, depth)}
    return out, failed


def _judge(entry: dict[str, Any], spec: PipelineSpec, name: str,
           per_combo: dict[tuple[str, str], dict[str, np.ndarray]], combo: tuple[str, str],
           reference: tuple[str, str], names: list[str], ref_measures: list[Any],
           s: Any) -> list[str]:
    """A candidate combination against the reference pipeline: Δ columns (the interval
    its gate on that measure decides with), attribution, gates and verdict. Returns the
    failed-gate lines."""
    (f, r), (f0, r0) = combo, reference
    kind, depth = entry["kind"], entry["depth"]
    values, ref_values = per_combo[combo], per_combo[reference]
    specs = combination_specs(spec, kind, depth, s)
    conf = {m: gate_confidence(specs, parse_measure(m).name, s.confidence) for m in names}
    for m in names:
        entry["metrics"][m]["vs_reference"] = paired_entry(values[m], ref_values[m], s, conf[m])
    entry["reference_metrics"] = {m.name: mean_entry(values[m.name], s) for m in ref_measures}
    if kind == "both":
        entry["attribution"] = {
            m: attribution(ref_values[m], per_combo[(f, r0)][m], per_combo[(f0, r)][m],
                           values[m], s, conf[m]) for m in names}
    gate = combination_gates(spec, kind, depth, values, ref_values, s)
    entry["verdict"] = "ungated" if gate is None else gate.verdict
    if gate is None:
        return []
    entry["gate"] = gate.to_dict()
    return [f"pipeline {spec.name} {name}: {c.gate} ({c.verdict})"
            for c in gate.checks if not c.passed]


def applicable_gates(spec: PipelineSpec, kind: str, depth: int) -> list[PipelineGate]:
    """The pipeline's gates on a combination of ``kind`` at ``depth``: ``stage: pipeline``
    applies to every candidate combination, ``retriever``/``reranker`` to their own."""
    return [g for g in spec.gates
            if (g.depth is None or g.depth == depth) and g.stage in ("pipeline", kind)]


def combination_specs(spec: PipelineSpec, kind: str, depth: int,
                      s: Any) -> list[GateSpec]:
    """The gates of a combination as the decision rule reads them: the same builder as
    the embedding gates, with the recipe's ``stats:`` (method, ``min_nonzero``,
    confidence). Fidelity floors (``against: reranker``) are decided like floors against
    the reference run."""
    return [gate_spec(g, s.confidence, s,
                      against="reference" if g.against == "reranker" else g.against)
            for g in applicable_gates(spec, kind, depth)]


def combination_gates(spec: PipelineSpec, kind: str, depth: int,
                      values: dict[str, np.ndarray], reference: dict[str, np.ndarray],
                      s: Any) -> VariantGate | None:
    """Decide a combination's gates from its per-query values (``None``: no gate applies;
    the combination is ungated). ``evalq gate`` calls this on the stored values."""
    mine = combination_specs(spec, kind, depth, s)
    if not mine:
        return None
    ids = tuple(str(i) for i in range(len(next(iter(values.values())))))
    return decide_gates(mine, PerQuery(ids, values), PerQuery(ids, reference),
                        resamples=s.resamples, seed=s.seed)


def _cost(spec: PipelineSpec, runs: list[FirstStageRun], rerankers: dict[str, Any],
          ds_name: str) -> dict[str, Any]:
    """Per reranker variant and depth: what reranking costs per query, measured."""
    fs = runs[0]
    out: dict[str, Any] = {"first_stage": {"name": fs.name,
                                           "seconds_per_query": fs.seconds_per_query,
                                           "forward_passes_per_query":
                                               fs.forward_passes_per_query},
                           "rerankers": {}}
    for name, entry in rerankers.items():
        scoring = entry["datasets"].get(ds_name, {}).get("scoring", {})
        rate = scoring.get("pairs_per_s")
        weight = (entry["backend"].get("quantization") or {}).get("weight_bytes")
        per_depth = {}
        for depth in spec.depths:
            passes = depth if spec.reranker.kind == "cross-encoder" else depth + 1
            seconds = depth / rate if rate else None
            multiplier = (seconds / fs.seconds_per_query
                          if seconds and fs.seconds_per_query else None)
            per_depth[str(depth)] = {
                "pairs_per_query": depth,
                "forward_passes_per_query": fs.forward_passes_per_query + passes,
                "rerank_seconds_per_query": seconds,
                "rerank_cost_multiplier_vs_first_stage": multiplier,
            }
        out["rerankers"][name] = {
            "pairs_per_s": rate, "pairs_scored": scoring.get("computed"),
            "pairs_cached": scoring.get("cached"),
            "forward_calls": scoring.get("forward_calls"),
            "weight_bytes": weight,
            "peak_rss_mb": entry["datasets"].get(ds_name, {}).get("peak_rss_mb"),
            "startup_s": entry["datasets"].get(ds_name, {}).get("startup_s"),
            "depths": per_depth,
            "statement": (f"reranking the top N costs N pair passes per query: "
                          f"{', '.join(f'N={d}: {d} passes' for d in spec.depths)}"
                          + (f" at {rate:.1f} pairs/s" if rate else " (all pairs cached: "
                             "no timing this run)")),
        }
    return out
