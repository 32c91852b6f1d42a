"""Borrowed sides at run time (issue 31): a variant searched with another variant's
vectors, or with vectors from a file, instead of encoding that side.

The run keeps only the reference's vectors in memory, and a candidate's are reduced to
per-query values as soon as they exist. A variant that later variants borrow from (a
*lender*, named by ``documents:`` / ``queries:``) keeps its encoded vectors per dataset
until the run ends, so the borrowed side is never encoded again, not even from the
cache; a variant that borrows both sides builds no engine at all.

Vectors from a file, a pgvector table, a Qdrant shard or a collection on a Qdrant
server (documents), or from a file
(queries, read by query id), are checked before they are used: a seeded sample of the
rows is compared with the reference engine's vectors of the same texts (the reference
has encoded the whole corpus and query slice already, so the probe costs no encoding).
A row below
the stated cosine, or with a norm further off than stated, stops the run with exit 2
naming the file, the lowest cosine and the ids; the probe's figures go into the summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evalq.core.errors import InputError
from evalq.data.vectorfiles import read_rows
from evalq.encode.matryoshka import common_dims
from evalq.plan.sides import ProbeOptions, SidePlan, StoredVectors, VectorFile
from evalq.plan.types import Plan
from evalq.retrieve import stored_vectors


@dataclass(frozen=True)
class Borrowed:
    """A side this variant did not encode: the vectors and where they came from."""

    vectors: np.ndarray
    source: str  # "variant fp32", "file corpus-vectors.npy"
    probe: dict[str, Any] | None = None  # a vector file's check against the reference


class Lent:
    """The encoded sides of the variants later variants borrow from, per dataset."""

    def __init__(self, plan: Plan) -> None:
        self.reference = plan.reference.name
        self.base = plan.recipe_file.parent
        wanted = {s for vp in plan.variants for s in (vp.sides.documents, vp.sides.queries)
                  if s is not None}
        if any(vp.sides.reads_files for vp in plan.variants):
            wanted.add(self.reference)  # the probe compares files with its vectors
        self.lenders = wanted
        self._kept: dict[tuple[str, str], tuple[Any, Any]] = {}

    def keep(self, variant: str, dataset: str, docs: Any, queries: Any) -> None:
        """Keep a lender's sides of ``dataset`` (the arrays are shared, not copied)."""
        if variant in self.lenders:
            self._kept[(variant, dataset)] = (docs, queries)

    def documents(self, sides: SidePlan, ds: Any, where: str) -> Borrowed | None:
        """The variant's borrowed documents of ``ds``, or None when it encodes them."""
        if sides.documents is not None:
            return Borrowed(self._kept[(sides.documents, ds.name)][0].vectors,
                            f"variant {sides.documents}")
        if sides.documents_file is not None:
            return self._from_file(sides.documents_file, ds, where, "documents")
        return None

    def queries(self, sides: SidePlan, ds: Any, where: str) -> Borrowed | None:
        """The variant's borrowed queries of ``ds``, or None when it encodes them."""
        if sides.queries_file is not None:
            return self._from_file(sides.queries_file, ds, where, "queries")
        if sides.queries is None:
            return None
        return Borrowed(self._kept[(sides.queries, ds.name)][1].vectors,
                        f"variant {sides.queries}")

    def _from_file(self, stored: StoredVectors, ds: Any, where: str, side: str) -> Borrowed:
        file = stored.file_for(ds.name)
        if file is None:  # the plan refuses it; a dataset renamed since is still input
            raise InputError(message=f"no vector file for dataset {ds.name}",
                             field=f"{where}.{side}.datasets",
                             fix=f"add {side}.datasets.{ds.name}: {{path: ..., ids: ...}}")
        ids = list(ds.corpus.ids if side == "documents" else ds.queries.ids)
        vectors = self._rows(file, ids, f"{where}.{side}")
        kept = self._kept[(self.reference, ds.name)]
        reference = (kept[0] if side == "documents" else kept[1]).vectors
        label = file.label()
        probe = probe_file(vectors, reference, ids, stored.probe,
                           file=label.removeprefix("file "), where=where, side=side)
        return Borrowed(vectors, label, probe)

    def _rows(self, file: VectorFile, wanted: list[str], where: str) -> np.ndarray:
        """The wanted rows of a vector file, a pgvector table, a Qdrant shard or a Qdrant
        server's collection (``where``: the side's recipe field)."""
        if file.pgvector is not None:
            db = file.pgvector
            return stored_vectors.pgvector_rows(db.dsn, db.table, db.id_column,
                                                db.vector_column, wanted, where)
        q = file.qdrant
        if q is not None and q.url is not None:
            assert q.collection is not None
            return stored_vectors.qdrant_server_rows(q.url, q.collection, q.api_key_env,
                                                     q.id_payload, wanted, where)
        if file.qdrant is not None:
            assert file.qdrant.path is not None
            folder = _resolve(file.qdrant.path, self.base)
            if file.qdrant.collection:
                folder = folder / file.qdrant.collection
            return stored_vectors.qdrant_rows(folder, file.qdrant.id_payload, wanted, where)
        assert file.path is not None
        path = _resolve(file.path, self.base)
        ids = _resolve(file.ids, self.base) if file.ids is not None else None
        return read_rows(path, ids, wanted, id_column=file.id_column,
                         vector_column=file.vector_column, what=where.rsplit(".", 1)[-1])


def _resolve(name: str, base: Path) -> Path:
    path = Path(name).expanduser()
    return path if path.is_absolute() else base / path


def probe_file(vectors: np.ndarray, reference: np.ndarray, ids: list[str],
               options: ProbeOptions, *, file: str, where: str, side: str = "documents"
               ) -> dict[str, Any]:
    """Compare a seeded sample of the file's rows with the reference engine's vectors of
    the same documents (or queries: ``side``); the figures, or an :class:`InputError`
    when a row misses."""
    rng = np.random.default_rng(options.seed)
    sample = np.sort(rng.choice(len(ids), size=min(options.texts, len(ids)), replace=False))
    mine, theirs = vectors[sample].astype(np.float64), reference[sample].astype(np.float64)
    norm_gap = None
    if mine.shape[1] == theirs.shape[1]:
        n_mine, n_theirs = np.linalg.norm(mine, axis=1), np.linalg.norm(theirs, axis=1)
        norm_gap = float(np.max(np.abs(n_mine / np.maximum(n_theirs, 1e-12) - 1.0)))
    ref_c, mine_c = common_dims(theirs.astype(np.float32), mine.astype(np.float32))
    cos = np.sum(ref_c * mine_c, axis=1) / np.maximum(
        np.linalg.norm(ref_c, axis=1) * np.linalg.norm(mine_c, axis=1), 1e-12)
    lowest = np.argsort(cos, kind="stable")[:3]
    record: dict[str, Any] = {
              "file": file, "side": side, "rows": len(ids), "texts": len(sample),
              "seed": options.seed,
              "min_cosine": options.min_cosine, "lowest_cosine": float(cos.min()),
              "mean_cosine": float(cos.mean()),
              "lowest_ids": [ids[sample[i]] for i in lowest],
              "norm_tolerance": options.norm_tolerance, "max_norm_difference": norm_gap}
    cosine_ok = record["lowest_cosine"] >= options.min_cosine
    norm_ok = norm_gap is None or norm_gap <= options.norm_tolerance
    if not (cosine_ok and norm_ok):
        what = (f"lowest cosine {record['lowest_cosine']:.6f} < {options.min_cosine}"
                if not cosine_ok else
                f"norms differ by up to {norm_gap:.4f} (tolerance {options.norm_tolerance})")
        raise InputError(
            message=f"the vectors in {file} do not match what the reference encodes today: "
            f"{what} over {len(sample)} sampled {side} (lowest: "
            f"{', '.join(record['lowest_ids'])})",
            field=f"{where}.{side}.probe",
            fix=f"re-embed the {'corpus' if side == 'documents' else 'queries'} with the "
            "reference's model and settings, or state the tolerance the file is known to "
            f"meet: {side}: {{path: ..., ids: ..., probe: "
            "{min_cosine: <lower>, norm_tolerance: <higher>}}")
    return {**record, "passed": True}


def encode_record(docs: Any, queries: Any) -> dict[str, Any]:
    """A dataset entry's ``encode``: each encoded side's counts; a borrowed side's source
    (``reused``) instead, and a vector file's probe."""
    out: dict[str, Any] = {}
    reused: dict[str, str] = {}
    for side, encoded in (("documents", docs), ("queries", queries)):
        if isinstance(encoded, Borrowed):
            reused[side] = encoded.source
        else:
            out[side] = encoded.stats.model_dump()
    if reused:
        out["reused"] = reused
    if isinstance(docs, Borrowed) and docs.probe is not None:
        out["probe"] = docs.probe
    if isinstance(queries, Borrowed) and queries.probe is not None:
        out["query_probe"] = queries.probe
    return out


def description(sides: SidePlan) -> dict[str, Any]:
    """What a variant that borrows both sides records instead of an engine's self-description."""
    return {"backend": "none", "engine": None, "reuses": {
        "documents": sides.source("documents"), "queries": sides.source("queries")}}
