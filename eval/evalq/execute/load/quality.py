"""Quality under load: probe texts with known idle vectors ride along with the traffic.

A served model may answer differently under load: servers batch by arrival, and several
int8 paths are batch-dependent. Parity (``evalq load``'s preflight) looks at idle answers
only, so here:

1. a probe set — ``load.quality.probes`` queries and as many documents, drawn from the
   sweep's texts by ``load.seed`` — is embedded once at idle, one text per request,
   through the same served endpoint (:func:`embed_idle`);
2. in every query and ingest series, every ``1/share``-th request carries probe texts
   instead of its own (:meth:`ProbeRun.interleave`); the answers are caught by the
   generator's answer check (:meth:`ProbeCollector.validator`), warm-up included (it is
   under the same load);
3. per step, :func:`step_quality` compares them with the idle vectors: cosine min / mean
   over every probe answer, and the top-``k`` overlap of each probe query against the
   probe documents, idle vs under load (:func:`step_quality` says which vectors);
4. :func:`judge_quality` turns a passing step whose quality fell under the floor into a
   ``quality`` step, so the knee (``sweep.knee_of``) stops below it. It only ever lowers
   a ``pass`` and adds reasons, so it composes with any other step check.

Rerank answers are scores, not vectors: rerank series carry no probes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import numpy as np

from evalq.execute.load.generator import RequestSpec, Validator
from evalq.plan.load import LoadQuality

# Cosines are computed in float64 from the JSON floats: identical answers can still fall
# short of 1 by rounding, so no floor is stricter than this.
ROUNDING = 1e-9

MakeRequest = Callable[[Sequence[str], int], RequestSpec]


def parse_vectors(body: bytes) -> list[np.ndarray] | None:
    """The embeddings of an OpenAI (``data[].embedding``, by ``index``) or TEI (a bare
    list of lists) answer; None when the body holds none."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return None
    if isinstance(parsed, dict):
        items = parsed.get("data")
        if not isinstance(items, list):
            return None
        try:
            items = sorted(items, key=lambda d: d.get("index", 0))
            return [np.asarray(d["embedding"], dtype=np.float64) for d in items]
        except (AttributeError, KeyError, TypeError, ValueError):
            return None
    if isinstance(parsed, list):
        try:
            return [np.asarray(v, dtype=np.float64) for v in parsed]
        except (TypeError, ValueError):
            return None
    return None


def _unit(v: np.ndarray) -> np.ndarray:
    n = float(np.linalg.norm(v))
    return v / n if n > 0 else v


def cosine_floor(tolerance: float | None, parity_min_cosine: float) -> tuple[float, str]:
    """The default ``min_cosine`` and where it came from.

    ``tolerance`` is the backend's declared batch-composition tolerance
    (``engines.spec.BatchDependence``): the largest component difference two batch
    compositions may show. For unit vectors of ``d`` components that bounds
    ``|a - b|² <= d·t²``, so ``cos(a, b) = 1 - |a - b|²/2 >= 1 - d·t²/2``. The floor used is
    ``1 - t``, which is below that bound whenever ``d·t <= 2`` (every declared tolerance,
    1e-6, up to two million components): a server that keeps its declaration never trips
    it, and any drift beyond rounding does. Where nothing is promised (``None``:
    batch-dependent engines, remote servers) the floor is the recipe's
    ``parity.min_cosine``: load may not move answers further than parity allows at idle.
    """
    if tolerance is None:
        return parity_min_cosine, f"parity.min_cosine {parity_min_cosine:g} (the backend " \
                                  "declares no batch-composition tolerance)"
    return 1.0 - max(tolerance, ROUNDING), f"1 - batch-composition tolerance {tolerance:g}"


@dataclass(frozen=True)
class QualityFloor:
    min_cosine: float
    min_overlap: float | None
    source: str  # where min_cosine came from (the recipe, or cosine_floor's derivation)


def choose_probes(count: int, n_queries: int, n_documents: int,
                  seed: int) -> tuple[list[int], list[int]]:
    """Indices of the probe queries and documents: a fixed draw by ``seed``."""
    rng = np.random.default_rng(seed)
    q = sorted(rng.choice(n_queries, size=min(count, n_queries), replace=False).tolist())
    d = sorted(rng.choice(n_documents, size=min(count, n_documents), replace=False).tolist())
    return [int(i) for i in q], [int(i) for i in d]


def embed_idle(url: str, specs: Sequence[RequestSpec], timeout_s: float) -> list[np.ndarray]:
    """Each request alone, one after the other (the server is otherwise idle); one vector
    per request. Raises ``RuntimeError`` naming the URL when an answer is not one."""
    out: list[np.ndarray] = []
    with httpx.Client(base_url=url.rstrip("/"), timeout=timeout_s,
                      headers={"content-type": "application/json"}) as client:
        for spec in specs:
            try:
                response = client.post(spec.path, content=spec.body)
            except httpx.HTTPError as exc:
                raise RuntimeError(f"{url}{spec.path}: {type(exc).__name__}: {exc}") from None
            vectors = parse_vectors(response.content) if response.is_success else None
            if not vectors or len(vectors) != 1:
                raise RuntimeError(f"{url}{spec.path} answered HTTP {response.status_code} "
                                   "without one embedding")
            out.append(_unit(vectors[0]))
    return out


@dataclass
class ProbeCollector:
    """What one step's probe requests were answered with: (``"q"`` | ``"d"``, index,
    cosine with the idle vector, the unit vector)."""

    idle: dict[str, np.ndarray]
    answers: list[tuple[str, int, float, np.ndarray]] = field(default_factory=list)

    def validator(self, base: Validator) -> Validator:
        def check(body: bytes, spec: RequestSpec) -> str | None:
            problem = base(body, spec)
            if problem is None and spec.probe is not None:
                vectors = parse_vectors(body)
                if vectors is None or len(vectors) != len(spec.probe):
                    return "bad_response"
                for (kind, index), vec in zip(spec.probe, vectors):
                    ref = self.idle[kind][index]
                    if vec.shape != ref.shape:
                        return "bad_response"
                    unit = _unit(vec)
                    self.answers.append((kind, index, float(unit @ ref), unit))
            return problem
        return check


@dataclass(frozen=True)
class ProbeRun:
    """A variant's probe set with its idle vectors, how to send it, and its floor."""

    queries: list[str]
    query_tokens: list[int]
    documents: list[str]
    document_tokens: list[int]
    query_vectors: np.ndarray  # (probe queries, dim), unit rows, at idle
    document_vectors: np.ndarray
    make_request: MakeRequest
    settings: LoadQuality
    floor: QualityFloor

    @property
    def stride(self) -> int:
        return max(1, round(1.0 / self.settings.share))

    def collector(self) -> ProbeCollector:
        return ProbeCollector({"q": self.query_vectors, "d": self.document_vectors})

    def _probe_requests(self, kind: str, size: int) -> list[RequestSpec]:
        if kind == "query":
            return [replace(self.make_request([q], n), probe=(("q", i),))
                    for i, (q, n) in enumerate(zip(self.queries, self.query_tokens))]
        out = []
        n = len(self.documents)
        for start in range(0, n, max(1, size)):
            idx = [(start + j) % n for j in range(size)]
            spec = self.make_request([self.documents[i] for i in idx],
                                     sum(self.document_tokens[i] for i in idx))
            out.append(replace(spec, probe=tuple(("d", i) for i in idx)))
        return out

    def interleave(self, kind: str, requests: list[RequestSpec]) -> list[RequestSpec]:
        """The series' requests with every ``stride``-th one a probe request (a probe query
        for ``query``, a batch of probe documents of the series' size for ``ingest``)."""
        if kind not in ("query", "ingest") or not requests:
            return requests
        probes = self._probe_requests(kind, requests[0].texts)
        if not probes:
            return requests
        # enough slots that every probe request is sent once per pass over the series
        slots = max(len(requests), len(probes) * self.stride)
        out: list[RequestSpec] = []
        for i in range(slots):
            if i % self.stride == self.stride - 1:
                out.append(probes[(i // self.stride) % len(probes)])
            else:
                out.append(requests[i % len(requests)])
        return out


def step_quality(run: ProbeRun, collector: ProbeCollector) -> dict[str, Any]:
    """Per step: how many probe texts were answered, their cosine with the idle vectors
    (min, mean), and the ranking overlap.

    Overlap: each probe query's top-``k`` probe documents under load vs at idle (share of
    the idle top-``k`` kept), min and mean over the probe queries. Under load, a query is
    every answer the step got for it (or its idle vector when the step sent no probe
    queries, e.g. ingest), and a document is its worst answer in the step (or its idle
    vector): the ranking effect of the drift this step showed."""
    answers = collector.answers
    if not answers:
        return {"probes": 0, "cosine_min": None, "cosine_mean": None,
                "overlap_min": None, "overlap_mean": None}
    cosines = np.array([a[2] for a in answers])
    docs = run.document_vectors.copy()
    worst: dict[int, float] = {}
    for kind, index, cos, vec in answers:
        if kind == "d" and cos < worst.get(index, 2.0):
            worst[index] = cos
            docs[index] = vec
    loaded = [(i, vec) for kind, i, _c, vec in answers if kind == "q"] or \
        list(enumerate(run.query_vectors))
    k = min(run.settings.top_k, len(docs))
    overlaps = []
    for i, vec in loaded:
        idle = set(np.argsort(-(run.document_vectors @ run.query_vectors[i]),
                              kind="stable")[:k].tolist())
        now = set(np.argsort(-(docs @ vec), kind="stable")[:k].tolist())
        overlaps.append(len(idle & now) / k if k else 1.0)
    return {"probes": len(answers), "cosine_min": float(cosines.min()),
            "cosine_mean": float(cosines.mean()), "overlap_min": float(min(overlaps)),
            "overlap_mean": float(np.mean(overlaps)), "top_k": k}


def judge_quality(verdict: str, reasons: list[str], quality: dict[str, Any] | None,
                  floor: QualityFloor | None) -> tuple[str, list[str]]:
    """A passing step whose probes fell under the floor becomes ``quality``; any other
    verdict stays (its reasons gain the quality one). A step with no probe answered is
    not judged (its quality is unknown, and says so: ``probes`` 0)."""
    if quality is None or floor is None or not quality.get("probes"):
        return verdict, reasons
    why = []
    if quality["cosine_min"] < floor.min_cosine:
        why.append(f"probe cosine min {quality['cosine_min']:.6f} < floor "
                   f"{floor.min_cosine:.6f} ({floor.source})")
    if floor.min_overlap is not None and quality["overlap_min"] < floor.min_overlap:
        why.append(f"probe top-{quality['top_k']} overlap min {quality['overlap_min']:.2f} "
                   f"< floor {floor.min_overlap:.2f}")
    if not why:
        return verdict, reasons
    return ("quality" if verdict == "pass" else verdict), [*reasons, *why]
