"""An openai-compatible server whose vectors are narrower than the model's (another model
behind the URL): exit 2 at the probe naming the URL, both widths and the fix, before the
run encodes (issue 32: http_wrongdim ended in exit 1, compared at the narrower width)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from faultkit import CannedServer, text_vector

import evalq.engines.openai_http
from evalq.core.errors import InputError
from evalq.core.values import EncodingSettings
from evalq.engines.http_probe import ProbeTarget, probe_variant
from evalq.engines.options import EncoderVariant


@pytest.fixture(autouse=True)
def _estimated_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model folder holds only config.json: count tokens by estimate, not tokenizer."""
    real = evalq.engines.openai_http.TokenCounter
    monkeypatch.setattr(evalq.engines.openai_http, "TokenCounter",
                        lambda settings, path, known=None: real(settings, None))


def _server(dim: int) -> CannedServer:
    def reply(inputs: list[str], headers: dict[str, str]) -> tuple[int, str, dict[str, str]]:
        data = [{"index": i, "embedding": text_vector(t, dim)} for i, t in enumerate(inputs)]
        return 200, json.dumps({"data": data, "model": "m"}), {}
    return CannedServer(reply, models={"data": [{"id": "m"}]})


def _target(tmp_path: Path, url: str, **http: object) -> ProbeTarget:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps({"hidden_size": 384}))
    variant = EncoderVariant.model_validate(
        {"name": "remote", "backend": "openai", "http": {"url": url, "model": "m", **http}})
    return ProbeTarget(variant, "candidates.0", model, EncodingSettings(normalize=True),
                       tmp_path / "cache")


def test_a_narrower_server_is_refused_at_the_probe(tmp_path: Path) -> None:
    with _server(128) as server, pytest.raises(InputError) as err:
        probe_variant(_target(tmp_path, server.url), tmp_path / "recipe.yaml")
    text = str(err.value)
    assert server.url in text and "128" in text and "384" in text
    assert "candidates.0.http.model" in text and "http.dimensions" in text


def test_a_matching_server_passes_the_probe(tmp_path: Path) -> None:
    with _server(384) as server:
        report = probe_variant(_target(tmp_path, server.url), tmp_path / "recipe.yaml")
    assert report.dimensions == 384
