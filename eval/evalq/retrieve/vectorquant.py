"""Output-vector quantization: what a vector database stores instead of float32.

Two schemes, as deployed in practice (sentence-transformers' ``quantize_embeddings``,
usearch, Vespa, Qdrant):

**int8 scalar quantization, calibrated per dimension.** Each dimension ``j`` gets a range
``[low_j, high_j]`` measured on the *corpus* vectors (the calibration set a deployment
has at index time) and is mapped onto the 256 int8 levels::

    step_j = (high_j - low_j) / 255
    code   = clip(round((x - low_j) / step_j) - 128, -128, 127)
    x'     = low_j + (code + 128) * step_j          (dequantized)

``calibration="minmax"`` (default, sentence-transformers' choice) takes the corpus
minimum and maximum; ``calibration="percentile"`` takes the ``100 - p`` and ``p``
percentiles (default p = 99.9) so one outlier does not waste levels, and clips the rest.
A dimension whose range is below 1/1000 of the widest (numerical noise: MiniLM has three
such dimensions) is widened to that floor around its midpoint.
Unlike sentence-transformers (which truncates and lets out-of-range values wrap around
in ``astype(int8)``), we round to the nearest level and clip: a query outside the corpus
range saturates instead of flipping sign.

*Queries are quantized too, with the corpus ranges* for the candidate search: that is
the standard practice (sentence-transformers quantizes both sides with the same ranges
and searches the int8 codes with an inner product),
so the first-stage scores are ``code(q) · code(d)``. That product weights dimension ``j``
by ``1 / step_j²`` and shifts it by the range midpoint, so without rescoring it reorders
close results: on MiniLM / pydocs it keeps about 0.75 of the float top 10 (overlap@10),
with ``rescore: 4`` about 0.98. With rescoring, the float query is
then scored against the *stored* document representation, the dequantized int8 vector
(the ranges are 2 × dim floats kept once per index, so a deployment has them). We
dequantize rather than use raw codes as sentence-transformers does, because the raw
codes weight each dimension by ``1 / step_j`` and reorder results the float model would
not.

**Binary (sign).** One bit per dimension, ``x > 0``, packed eight to a byte with
``np.packbits``; candidate search by Hamming distance (queries binarized the same way),
reported as the ±1 inner product ``dim - 2 × hamming``. Rescoring scores the float query
against ``2 × bit - 1``, which is all a binary index stores.

**Asymmetric search** (``queries="float"``): the documents are stored as above, and the
float query is scored directly against the stored representation (the dequantized int8
vector, or ``2 × bit - 1``) over the whole corpus, with no quantized first stage: what a
deployment that keeps its queries fp32 and only compresses its index ranks by.

The float document vectors are never used after quantization: a deployment that keeps
them would not need to quantize.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

VectorQuantization = Literal["none", "int8", "binary"]
QuerySide = Literal["quantized", "float"]
Calibration = Literal["minmax", "percentile"]

_MIN_RELATIVE_WIDTH = 1e-3


@dataclass(frozen=True)
class VectorSpec:
    """How the index stores document vectors and whether it rescores.

    ``rescore=r`` retrieves ``depth × r`` candidates with the quantized index and reorders
    them by the float query against the stored (quantized) documents; ``None`` keeps the
    quantized scores. ``queries="float"`` skips the quantized first stage: the float
    query scores every stored document (asymmetric search).
    """

    quantize: VectorQuantization = "none"
    rescore: int | None = None
    calibration: Calibration = "minmax"
    percentile: float = 99.9
    queries: QuerySide = "quantized"

    def __post_init__(self) -> None:
        if self.quantize not in ("none", "int8", "binary"):
            raise ValueError(f"quantize must be none, int8 or binary, got {self.quantize!r}")
        if self.rescore is not None and self.rescore < 1:
            raise ValueError(f"rescore is a candidate multiplier >= 1, got {self.rescore}")
        if self.quantize == "none" and self.rescore is not None:
            raise ValueError("rescore needs quantized vectors (quantize: int8 or binary)")
        if self.calibration not in ("minmax", "percentile"):
            raise ValueError(f"calibration must be minmax or percentile, got {self.calibration!r}")
        if not 50.0 < self.percentile <= 100.0:
            raise ValueError(f"percentile must be in (50, 100], got {self.percentile}")
        if self.queries not in ("quantized", "float"):
            raise ValueError(f"queries must be quantized or float, got {self.queries!r}")
        if self.queries == "float" and (self.quantize == "none" or self.rescore is not None):
            raise ValueError("queries='float' needs quantized documents and no rescoring")

    def bytes_per_vector(self, dim: int) -> int:
        if self.quantize == "int8":
            return dim
        if self.quantize == "binary":
            return (dim + 7) // 8
        return 4 * dim

    def record(self, dim: int) -> dict[str, Any]:
        """Manifest entry: what the index stores and how candidates are scored."""
        record: dict[str, Any] = {
            "quantize": self.quantize,
            "rescore": self.rescore,
            "dim": dim,
            "bytes_per_vector": self.bytes_per_vector(dim),
            "float32_bytes_per_vector": 4 * dim,
            "compression": 4 * dim / self.bytes_per_vector(dim),
        }
        if self.quantize == "int8":
            record |= {
                "calibration": self.calibration,
                "percentile": self.percentile if self.calibration == "percentile" else None,
                "calibrated_on": "corpus vectors",
                "index_overhead_bytes": 2 * 4 * dim,
                "candidate_scoring": "int8 query codes · int8 document codes (corpus ranges)",
                "rescoring": "float query · dequantized int8 document" if self.rescore else None,
            }
        elif self.quantize == "binary":
            record |= {
                "candidate_scoring": "dim - 2·hamming(sign bits) (faiss IndexBinaryFlat)",
                "rescoring": "float query · (2·bit - 1)" if self.rescore else None,
            }
        if self.queries == "float":
            stored = "dequantized int8" if self.quantize == "int8" else "(2·bit - 1)"
            record |= {"queries": "float",
                       "candidate_scoring": f"float query · {stored} document, every "
                       "document (asymmetric, no quantized first stage)",
                       "rescoring": None}
        return record


@dataclass(frozen=True)
class Int8Ranges:
    """Per-dimension calibration ranges (float32, shape (dim,) each)."""

    low: np.ndarray
    high: np.ndarray

    @property
    def step(self) -> np.ndarray:
        width = self.high - self.low
        # A constant dimension carries no information; any step maps it to one level.
        return np.where(width > 0, width / 255.0, 1.0).astype(np.float32)


def calibrate_int8(
    vectors: np.ndarray, *, calibration: Calibration = "minmax", percentile: float = 99.9
) -> Int8Ranges:
    """Ranges measured on ``vectors`` (the corpus), per dimension."""
    vectors = _as_matrix(vectors)
    if vectors.shape[0] == 0:
        raise ValueError("int8 calibration needs at least one corpus vector")
    if calibration == "minmax":
        low, high = vectors.min(axis=0), vectors.max(axis=0)
    else:
        low = np.percentile(vectors, 100.0 - percentile, axis=0)
        high = np.percentile(vectors, percentile, axis=0)
    # A dimension whose corpus spread is a tiny fraction of the widest one holds rounding
    # noise, not signal (MiniLM has three dimensions spanning ~1e-32): stretched over 256
    # levels, that noise would dominate every code product. Widen such ranges around their
    # midpoint to ``_MIN_RELATIVE_WIDTH`` of the widest, so the dimension maps to ~one level.
    width = high - low
    floor = _MIN_RELATIVE_WIDTH * float(width.max())
    narrow = width < floor
    mid = (high + low) / 2
    low = np.where(narrow, mid - floor / 2, low)
    high = np.where(narrow, mid + floor / 2, high)
    return Int8Ranges(low=low.astype(np.float32), high=high.astype(np.float32))


def quantize_int8(vectors: np.ndarray, ranges: Int8Ranges) -> np.ndarray:
    vectors = _as_matrix(vectors)
    levels = np.rint((vectors - ranges.low) / ranges.step) - 128.0
    return np.clip(levels, -128, 127).astype(np.int8)


def dequantize_int8(codes: np.ndarray, ranges: Int8Ranges) -> np.ndarray:
    return (ranges.low + (codes.astype(np.float32) + 128.0) * ranges.step).astype(np.float32)


def quantize_binary(vectors: np.ndarray) -> np.ndarray:
    """Sign bits packed eight per byte (uint8, shape (n, ceil(dim / 8)))."""
    return np.packbits(_as_matrix(vectors) > 0, axis=1)


def unpack_signs(codes: np.ndarray, dim: int) -> np.ndarray:
    """``2 × bit - 1`` as float32 (n, dim): the ±1 vectors a binary index stores."""
    bits = np.unpackbits(codes, axis=1, count=dim)
    return bits.astype(np.float32) * 2.0 - 1.0


@dataclass(frozen=True)
class QuantizedDocuments:
    """The stored form of a corpus: codes plus what is needed to score them."""

    spec: VectorSpec
    dim: int
    codes: np.ndarray  # int8 (n, dim) or packed uint8 (n, ceil(dim/8))
    ranges: Int8Ranges | None

    @property
    def nbytes(self) -> int:
        return int(self.codes.nbytes)

    def query_codes(self, queries: np.ndarray) -> np.ndarray:
        """Queries in the index's own representation, for candidate search."""
        if self.spec.quantize == "int8":
            assert self.ranges is not None
            return quantize_int8(queries, self.ranges)
        return quantize_binary(queries)

    def stored_vectors(self, rows: np.ndarray) -> np.ndarray:
        """float32 view of the stored documents ``rows`` (any shape of indices), for rescoring."""
        flat = np.asarray(rows, dtype=np.int64).reshape(-1)
        if self.spec.quantize == "int8":
            assert self.ranges is not None
            out = dequantize_int8(self.codes[flat], self.ranges)
        else:
            out = unpack_signs(self.codes[flat], self.dim)
        return out.reshape((*np.shape(rows), self.dim))


def quantize_documents(doc_vectors: np.ndarray, spec: VectorSpec) -> QuantizedDocuments:
    """Calibrate (int8) and encode the corpus; the float vectors can be dropped afterwards."""
    doc_vectors = _as_matrix(doc_vectors)
    dim = int(doc_vectors.shape[1])
    if spec.quantize == "int8":
        ranges = calibrate_int8(
            doc_vectors, calibration=spec.calibration, percentile=spec.percentile
        )
        return QuantizedDocuments(spec, dim, quantize_int8(doc_vectors, ranges), ranges)
    if spec.quantize == "binary":
        return QuantizedDocuments(spec, dim, quantize_binary(doc_vectors), None)
    raise ValueError("quantize_documents needs quantize: int8 or binary")


def _as_matrix(vectors: np.ndarray) -> np.ndarray:
    array = np.asarray(vectors, dtype=np.float32)
    if array.ndim != 2:
        raise ValueError(f"expected a (n, dim) matrix of vectors, got shape {array.shape}")
    return array
