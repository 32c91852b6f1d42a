"""The end-to-end database stage: each request is a query text through the served model
(HTTP), then its vector searched in the variant's database, timed as one request.

It runs for a variant that is both served (``load.variants``) and named in
``load.databases``, while its server is up, after its own workloads: what a user's query
costs in that deployment, model and database together. The served answer's vector is
truncated to the variant's Matryoshka ``dims`` as the run truncates it; each search is
checked against the sequential search of the vectors the stage encoded before (a served
model that answers other vectors under load shows up as answers that differ).

A failed request names its side: the model's failures are counted as ``model_transport``,
``model_http_5xx``, ``model_http_4xx`` and ``model_bad_response``, the database's as
``database_error``; a ``timeout`` is either's (both wait the same ``timeout_s``, and the
generator records every timeout at it). A model server evalq started that exits during
a step ends the stage as ``server_died`` naming the model, not the database.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import numpy as np

from evalq.encode.matryoshka import truncate
from evalq.execute.load.dbsearch import SearchGenerator, WorkerPool
from evalq.execute.load.generator import LoadGenerator, RequestSpec, StepMeasurement


class _Both:
    """The step's HTTP client and search pool, entered and left together."""

    def __init__(self, http: httpx.AsyncClient, pool: WorkerPool) -> None:
        self.http, self.pool = http, pool

    async def __aenter__(self) -> _Both:
        await self.http.__aenter__()
        await self.pool.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            await self.pool.__aexit__(*exc)
        finally:
            await self.http.__aexit__(*exc)


def read_vector(body: bytes, api: str) -> np.ndarray | None:
    """The one embedding of an answer (OpenAI ``data[0].embedding``, TEI ``[[...]]``)."""
    try:
        parsed = json.loads(body)
        vector = parsed[0] if api == "tei" else parsed["data"][0]["embedding"]
        out = np.asarray(vector, dtype=np.float32)
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return out if out.ndim == 1 and out.size else None


class EndToEndGenerator(SearchGenerator):
    """A search generator whose requests go through the served model first."""

    def __init__(self, base: LoadGenerator, search: SearchGenerator, api: str,
                 dims: int | None) -> None:
        super().__init__(base.bounds, search.make_pool, search.cap)
        self.http, self.api, self.dims = base, api, dims

    def open_client(self, connections: int) -> _Both:
        return _Both(self.http.open_client(connections), self.new_pool(connections))

    async def attempt(self, client: Any, spec: RequestSpec,
                      result: StepMeasurement | None) -> str | None:
        import asyncio

        assert spec.payload is not None
        try:
            response = await client.http.post(spec.path, content=spec.body)
        except httpx.TimeoutException:
            return "timeout"
        except httpx.HTTPError:
            return "model_transport"
        if result is not None:
            result.status_codes[str(response.status_code)] += 1
        if response.status_code >= 400:
            return "model_http_5xx" if response.status_code >= 500 else "model_http_4xx"
        vector = read_vector(response.content, self.api)
        if vector is None:
            return "model_bad_response"
        if self.dims is not None:
            vector = truncate(vector[None, :], self.dims)[0]
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(client.pool.executor, client.pool.search_vector,
                                          spec.payload, vector)
