"""The options of ``kind: qdrant``, by Qdrant's own names: one model for both places a
variant's Qdrant collection can live, Qdrant's engine in-process (qdrant-edge-py, the
default, a shard under ``path``) and a team's Qdrant server by ``url:`` (qdrant-client,
REST). Both read the same ``hnsw_config``, ``optimizers_config``, ``quantization_config``
and ``search_params``, so one variant can be pointed at either without rewriting it.

Why the defaults lower Qdrant's thresholds: see :mod:`evalq.retrieve.qdrant_kind`'s note
on the indexing trap.
"""

from __future__ import annotations

import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from evalq.core.options import StrictOptions, at_most
from evalq.core.redact import without_password
from evalq.retrieve.kinds import IndexProof, KindOptions, SweepOptions

# the options that shape a stored shard or collection (its key); search_params are
# searched at any value
BUILD_OPTIONS = ("distance", "hnsw_config", "optimizers_config", "quantization_config")
DEFAULT_TIMEOUT_S = 30  # one REST request to a Qdrant server
DEFAULT_INDEX_WAIT_S = 600.0  # how long a server may take to index an uploaded collection
LOWER_IS_BETTER = {"Euclid", "Manhattan"}  # Qdrant returns these as distances
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SERVER_ONLY = ("collection", "api_key_env", "timeout", "index_wait_s")


class HnswConfig(StrictOptions):
    """Qdrant's ``hnsw_config`` (``full_scan_threshold`` defaults to 1 KB here, not
    Qdrant's 10000: see the module's note on the trap). ``m: 0`` is Qdrant's way to build
    no graph: every search is then a full scan, and the proof says so."""

    m: int = Field(default=16, ge=0)
    ef_construct: int = Field(default=100, ge=4)
    full_scan_threshold: int = Field(default=1, ge=0)


class OptimizersConfig(StrictOptions):
    """Qdrant's ``optimizers_config``: the segment size (KB) above which it builds the
    index (1 here, so a small collection is indexed; Qdrant's default is 10000)."""

    indexing_threshold: int = Field(default=1, ge=1)


class ScalarQuantization(StrictOptions):
    type: Literal["int8"] = "int8"
    quantile: float | None = Field(default=None, gt=0.5, le=1.0)


class BinaryQuantization(StrictOptions):
    encoding: Literal["one_bit", "one_and_half_bits", "two_bits"] = "one_bit"


class ProductQuantization(StrictOptions):
    compression: Literal["x4", "x8", "x16", "x32", "x64"] = "x16"


class QuantizationConfig(StrictOptions):
    """Qdrant's ``quantization_config``: exactly one of ``scalar``, ``binary``,
    ``product``."""

    scalar: ScalarQuantization | None = None
    binary: BinaryQuantization | None = None
    product: ProductQuantization | None = None

    @model_validator(mode="after")
    def _one(self) -> QuantizationConfig:
        if sum(x is not None for x in (self.scalar, self.binary, self.product)) != 1:
            raise ValueError("give exactly one of scalar, binary, product")
        return self


# Qdrant's candidates from the codes are limit x oversampling, rescored by the float
# vectors: 10**12 planned and rescored every point.
Oversampling = Annotated[float, Field(ge=1.0, allow_inf_nan=False), at_most(
    1000, "oversampling", "the candidates from the codes, rescored, are limit × oversampling",
    "a small factor (1.5 to 4 is usual), or search_params.exact: true to score every point")]


class QuantizationSearch(StrictOptions):
    ignore: bool = False
    rescore: bool | None = None
    oversampling: Oversampling | None = None


class SearchParams(StrictOptions):
    """Qdrant's ``search_params``: ``hnsw_ef``, ``exact`` and ``quantization``
    (``ignore``, ``rescore``, ``oversampling``); one shard serves a sweep of them."""

    hnsw_ef: int | None = Field(default=None, ge=1)
    exact: bool = False
    quantization: QuantizationSearch | None = None


class QdrantSweep(SweepOptions):
    """``sweep:`` of a Qdrant shard: ``hnsw_ef`` or ``oversampling`` (of
    ``search_params``), each a search request's own setting on the one shard."""

    TARGETS: ClassVar[dict[str, tuple[str, ...]]] = {
        "hnsw_ef": ("search_params", "hnsw_ef"),
        "oversampling": ("search_params", "quantization", "oversampling")}
    BUILD_TIME: ClassVar[tuple[str, ...]] = (
        "hnsw_config", "m", "ef_construct", "quantization_config", "distance",
        "optimizers_config", "indexing_threshold", "full_scan_threshold")

    hnsw_ef: list[int] | None = None
    oversampling: list[float] | None = None


class QdrantOptions(KindOptions):
    """``index: {kind: qdrant, ...}``: a Qdrant collection, by Qdrant's names.
    ``distance``: ``Dot`` (what exact search uses), ``Cosine``, ``Euclid``,
    ``Manhattan``.

    Where it lives: left as it is, a shard of Qdrant's engine in-process; ``path`` is
    the folder the shard is kept in, in a subfolder named by the vectors' key
    (:mod:`evalq.retrieve.keyed`), reused by the next run of that key (left out, a
    temporary folder removed after the run). ``url`` is a Qdrant server instead (REST,
    through qdrant-client): ``collection`` names the collection (left out,
    ``evalq-<key>``), ``api_key_env`` the environment variable holding its API key (the
    key itself is never written anywhere), ``timeout`` one request's seconds and
    ``index_wait_s`` how long the server may take to index the collection."""

    kind: Literal["qdrant"] = "qdrant"
    path: str | None = Field(default=None, min_length=1)
    url: str | None = Field(default=None, min_length=1)
    collection: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,254}$")
    api_key_env: str | None = Field(default=None, min_length=1)
    # at most a day: 10**12 s passed, and every request failed in the socket layer
    # ("timestamp too large"), reported as a server that did not answer
    timeout: int | None = Field(default=None, ge=1, le=86400)
    index_wait_s: float | None = Field(default=None, gt=0, le=86400, allow_inf_nan=False)
    distance: Literal["Dot", "Cosine", "Euclid", "Manhattan"] = "Dot"
    hnsw_config: HnswConfig = HnswConfig()
    optimizers_config: OptimizersConfig = OptimizersConfig()
    quantization_config: QuantizationConfig | None = None
    search_params: SearchParams = SearchParams()
    sweep: QdrantSweep | None = None

    @model_validator(mode="after")
    def _oversampling_needs_codes(self) -> QdrantOptions:
        sweep = self.sweep
        if sweep is not None and sweep.oversampling is not None \
                and self.quantization_config is None:
            raise ValueError("sweep.oversampling: oversampling applies to quantized vectors; "
                             "fix: set quantization_config (scalar, binary or product), or "
                             "sweep hnsw_ef")
        if sweep is not None and sweep.hnsw_ef is not None and self.search_params.exact:
            raise ValueError("sweep.hnsw_ef: search_params.exact searches every point "
                             "whatever hnsw_ef is, so every swept value would be the same "
                             "search; fix: set exact: false, or leave the sweep out")
        if sweep is not None and sweep.hnsw_ef is not None and self.hnsw_config.m == 0:
            raise ValueError("sweep.hnsw_ef: hnsw_config.m 0 builds no HNSW graph, so every "
                             "search scans every point whatever hnsw_ef is; fix: set m "
                             "(16 is Qdrant's default), or leave the sweep out")
        if self.search_params.quantization is not None and self.quantization_config is None:
            # Qdrant takes it and does nothing: a variant 'rescored at 4x oversampling'
            # would be an unquantized search under that name
            raise ValueError("search_params.quantization: ignore, rescore and oversampling "
                             "apply to quantized vectors, and this collection stores none; "
                             "fix: set quantization_config (scalar, binary or product), or "
                             "leave search_params.quantization out")
        return self

    @model_validator(mode="after")
    def _where_it_lives(self) -> QdrantOptions:
        if self.url is None:
            given = [n for n in _SERVER_ONLY if getattr(self, n) is not None]
            if given:
                raise ValueError(f"{', '.join(given)} apply to a Qdrant server (url:); fix: "
                                 "set url: http://host:6333, or leave them out (the "
                                 "in-process shard is named by its key under path)")
            return self
        if self.path is not None:
            raise ValueError("url (a Qdrant server) and path (the in-process shard's "
                             "folder) exclude each other; fix: keep one")
        check_server(self.url, self.api_key_env)
        return self

    def server_label(self) -> str:
        """The url with any password in it masked, for records and errors."""
        return without_password(self.url or "")

    def record(self) -> dict[str, Any]:
        out = self.model_dump(exclude={"kind", "sweep", "url"})
        out["url"] = None if self.url is None else self.server_label()
        return out

    def search_options(self) -> SearchParams:
        return self.search_params

    def with_home(self, cache_dir: Path) -> QdrantOptions:
        """The shards' folder under the cache (``vdb/qdrant-edge-<version>``: a shard
        opens with the engine that wrote it), unless the index names its own ``path``
        or is a server's collection (``url``)."""
        if self.path is not None or self.url is not None:
            return self
        home = cache_dir / "vdb" / f"qdrant-edge-{edge_version() or 'unknown'}"
        return self.model_copy(update={"path": str(home)})


def edge_version() -> str | None:
    """The installed qdrant-edge-py (a shard opens with the engine that wrote it)."""
    try:
        return version("qdrant-edge-py")
    except PackageNotFoundError:
        return None


def check_server(url: str, api_key_env: str | None) -> None:
    """A Qdrant server's ``url`` and ``api_key_env`` as a recipe gives them (for the
    ``index:`` kind and for ``documents:`` alike); a ValueError with the fix."""
    if not re.match(r"^https?://[^/\s]+", url):
        raise ValueError(f"url {without_password(url)!r} is not an http(s) URL; fix: "
                         "give the server's REST address, e.g. http://localhost:6333")
    try:  # a port out of range or an unclosed [ failed in the client, as an exit 3
        parts = urlsplit(url)
        port, host = parts.port, parts.hostname
    except ValueError as exc:
        raise ValueError(f"url {without_password(url)!r} cannot be parsed ({exc}); fix: "
                         "give the server's REST address, e.g. http://localhost:6333"
                         ) from None
    if not host or port == 0:
        raise ValueError(f"url {without_password(url)!r} names no host and port to "
                         "connect to; fix: give the server's REST address, e.g. "
                         "http://localhost:6333")
    if api_key_env is not None and not _ENV_NAME.match(api_key_env):
        raise ValueError(f"api_key_env {api_key_env!r} is not an environment "
                         "variable's name; fix: give the NAME of the variable that "
                         "holds the key (e.g. QDRANT_API_KEY), never the key")


def proof(options: QdrantOptions, params: SearchParams, info: dict[str, int], dim: int
          ) -> IndexProof:
    """The proof of a Qdrant search, from what the shard or server reports (``points``,
    ``indexed_vectors``): how many vectors the HNSW index holds. A search is exhaustive
    when it asked for ``exact``, when nothing is indexed, when the vectors are under
    ``full_scan_threshold``, or when ``m`` is 0 (Qdrant builds no graph then, and still
    counts every vector as indexed); such a search is recorded as exact, never as an
    index run."""
    vectors_kb = info["points"] * dim * 4 / 1024
    below = vectors_kb < options.hnsw_config.full_scan_threshold
    no_graph = options.hnsw_config.m == 0
    exact = params.exact or info["indexed_vectors"] == 0 or below or no_graph
    quant = options.quantization_config
    method = "full scan" if exact else "HNSW"
    if quant is not None:
        method += f" over {next(k for k, v in quant.model_dump().items() if v)} codes"
    return IndexProof(kind="qdrant", exact=exact, method=method, params={
        **info, "vectors_kb": vectors_kb, "below_full_scan_threshold": below,
        "hnsw_graph": not no_graph,
        **options.hnsw_config.model_dump(), **options.optimizers_config.model_dump(),
        "search_params": params.model_dump(exclude_none=True)})
