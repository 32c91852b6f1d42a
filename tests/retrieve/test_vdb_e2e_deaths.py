"""The end-to-end database stage (``<variant>@<kind>+model``) tells a dead model server
from a dead database (issue 30): each request goes through a served model, then a real
Qdrant shard. When the model server's process exits between levels, the next level ends
the stage as ``server_died`` naming the model server, its failures are counted as the
model's (``model_transport``), and the shard, still answering, is not blamed.

The model server is a stand-in in a process of its own: an OpenAI ``/v1/embeddings``
route answering each query text ``q<i>`` with query i's vector, so the database's
answers can be checked against the sequential search as the real stage checks them.
No model is loaded: what is tested is which side a failure is laid on."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from evalq.execute.load.dbe2e import EndToEndGenerator
from evalq.execute.load.dbsearch import (
    SearchDrive,
    SearchGenerator,
    WorkerPool,
    step_bounds,
    sweep_searches,
)
from evalq.execute.load.generator import LoadGenerator
from evalq.execute.load.sweep import Endpoint, embed_request
from evalq.plan.load import LoadSection
from evalq.retrieve.registry import INDEX_KINDS
from support.clustered import clustered

pytestmark = [pytest.mark.server, pytest.mark.process]

N_DOCS, N_QUERIES, DEPTH = 300, 8, 10
SECTION = {"warmup_s": 0.1, "duration_s": 0.4, "max_requests": 200, "timeout_s": 5,
           "parity": False, "stop_on_break": False,
           "workloads": [{"name": "search", "kind": "query", "slo_p99_ms": 5000,
                          "closed_loop": {"concurrency": [1, 2, 3]}}]}

# The stand-in model server: query i's vector for the text "q<i>".
_MODEL = """
import json, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
import numpy as np
vectors = np.load(sys.argv[1])

class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        data = [{"object": "embedding", "index": i,
                 "embedding": vectors[int(text[1:])].tolist()}
                for i, text in enumerate(body["input"])]
        reply = json.dumps({"object": "list", "data": data}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
server.serve_forever()
"""


def test_a_model_server_that_dies_is_named_and_the_database_is_not(
        tmp_path: Path, qdrant_root: Path) -> None:
    docs, queries = clustered(N_DOCS, 16, N_QUERIES, seed=5)
    np.save(tmp_path / "queries.npy", queries.vectors)
    child = subprocess.Popen([sys.executable, "-c", _MODEL, str(tmp_path / "queries.npy")],
                             stdout=subprocess.PIPE, text=True)
    section = LoadSection.model_validate(SECTION)
    index: Any = INDEX_KINDS.build(INDEX_KINDS.parse(
        {"kind": "qdrant", "path": str(qdrant_root), "hnsw_config": {"m": 8}},
        "vectors", "faiss"), docs, where="candidates.x.index")
    try:
        assert child.stdout is not None
        endpoint = Endpoint("srv", child.stdout.readline().strip(), "openai",
                            pid=child.pid, alive=lambda: child.poll() is None)
        ranking = index.search(queries, DEPTH)
        expected = [frozenset(ranking.doc_ids[j] for j in row if j >= 0)
                    for row in ranking.indices]
        bounds = step_bounds(section)

        def generator() -> EndToEndGenerator:
            return EndToEndGenerator(LoadGenerator(endpoint.url, bounds), SearchGenerator(
                bounds, lambda size: WorkerPool(index, size, section.timeout_s,
                                                queries.vectors, DEPTH, expected), None),
                endpoint.api, None)

        requests = [replace(embed_request(endpoint, [f"q{i}"], 3), payload=i)
                    for i in range(N_QUERIES)]
        steps: list[dict[str, Any]] = []

        def kill_after_first(step: dict[str, Any], m: Any) -> None:
            steps.append(step)
            if len(steps) == 1:
                child.kill()
                child.wait()

        drive = SearchDrive(requests, generator, index.server_watch(), index.alive,
                            endpoint.alive)
        outcome = sweep_searches(section.workloads[0], section, drive, kill_after_first)
        database_alive = index.alive()
    finally:
        index.close()
        if child.poll() is None:
            child.kill()
            child.wait()
    first, second = steps
    # the first level went through both, and every answer was the sequential search's
    assert first["verdict"] == "pass" and first["errors"] == {}
    assert first["database"]["differs_from_sequential"] == 0
    # the second: the model is gone, the shard is not, and the stage says which died
    assert len(steps) == 2 and second["verdict"] == "server_died"
    assert outcome.server_died and outcome.died == "model server" and database_alive
    assert "model server" in second["reasons"][-1]
    assert set(second["errors"]) == {"model_transport"} and second["ok"] == 0
    assert second["database"]["first_error"] is None  # no search was sent to blame it
