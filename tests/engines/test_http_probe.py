"""HTTP routes and the pre-run probe, against the TEI/OpenAI stand-in server.

The stand-in (tests/support/fake_embedding_server.py) computes real MiniLM embeddings and follows
TEI's and OpenAI's schemas; it lists no /openapi.json, so these tests cover the fallback
wording. What a real server lists (Infinity's /openapi.json, /models) is tested in
tests/engines/test_infinity.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import evalq
from evalq.core.errors import InputError
from evalq.engines.http_probe import probe_http_variants
from evalq.recipe.schema import Recipe
from support import recipes
from support.fake_embedding_server import FakeState, fake_server
from support.probes import probe_targets

pytestmark = [pytest.mark.model]


@pytest.fixture(scope="module")
def st_model(minilm_path: Path):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(minilm_path), device="cpu")


def _recipe(http: dict[str, Any], backend: str = "openai", **extra: Any) -> Recipe:
    return Recipe.model_validate(recipes.recipe("probe", datasets=["pydocs"], candidates=[
        {"name": "remote", "backend": backend, "http": {"retries": 0, **http}, **extra}]))


def test_probe_reports_route_dimensions_and_norm(st_model) -> None:
    with fake_server(FakeState(st_model)) as server:
        recipe = _recipe({"url": server.url, "model": "m"})
        reports = probe_http_variants(probe_targets(recipe), Path("r.yaml"))
        tei = _recipe({"url": server.url}, backend="tei")
        tei_reports = probe_http_variants(probe_targets(tei), Path("r.yaml"))
    report = reports["remote"]
    assert report["endpoint"] == f"{server.url}/v1/embeddings"
    assert report["dimensions"] == 384
    assert report["raw_norm"] == pytest.approx(1.0, abs=1e-5)
    assert tei_reports["remote"]["endpoint"] == f"{server.url}/embed"
    assert tei_reports["remote"]["served_model"] is None or "MiniLM" in str(
        tei_reports["remote"]["served_model"])


def test_wrong_route_names_the_field_and_what_the_server_answers(st_model) -> None:
    with fake_server(FakeState(st_model)) as server:
        recipe = _recipe({"url": server.url, "model": "m", "route": "/embeddings"})
        with pytest.raises(InputError) as caught:
            probe_http_variants(probe_targets(recipe), Path("r.yaml"))
    text = str(caught.value)
    assert "404" in text and "no route /embeddings" in text
    assert caught.value.field == "candidates.0.http.route"
    # The stand-in lists only /info: the message names its model and the usual routes.
    assert "/info model sentence-transformers/all-MiniLM-L6-v2" in text
    assert "Infinity: /embeddings" in text


def test_server_that_normalizes_against_a_recipe_that_does_not(st_model) -> None:
    with fake_server(FakeState(st_model)) as server:
        recipe = _recipe({"url": server.url, "model": "m"},
                         encoding={"normalize": False})
        with pytest.raises(InputError) as caught:
            probe_http_variants(probe_targets(recipe), Path("r.yaml"))
    assert "normalize: false" in str(caught.value)
    assert caught.value.field == "candidates.0.encoding.normalize"


def test_a_wrong_route_stops_the_run_before_the_reference_encodes(
        st_model, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with fake_server(FakeState(st_model)) as server:
        recipe = _recipe({"url": server.url, "model": "m", "route": "/v2/embed"})
        with pytest.raises(InputError, match="no route /v2/embed"):
            evalq.run(recipe.model_dump(mode="json", exclude_unset=True), progress=False)
        posted = [r.path for r in server.state.requests if r.payload is not None]
    # Nothing was encoded and no results folder was started: the probe ran first.
    assert posted == ["/v2/embed"]
    assert not (tmp_path / "results").exists() and not (tmp_path / ".evalq-cache").exists()
