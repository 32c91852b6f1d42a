"""``evalq validate`` and ``evalq run`` refuse the same recipes: validate said "ok" for
inline dataset specs (``stream:`` settings, names) that run then refused when it loaded
the dataset, because the plan never parsed inline specs. Each case here goes through
``evalq validate`` and through ``evalq run`` up to the point where work would start (the
results folder is opened); they must agree, and a refusal must be exit 2 at the line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from faultkit import no_traceback, recipe_data, run_cli

from evalq.app.api import run_recipe_file
from evalq.core.errors import InputError
from evalq.execute import evaluate
from support import recipes


class _WorkWouldStart(Exception):
    """Raised where the run opens its results folder: everything before it accepted."""


STREAMS: list[Any] = [{}, {"block_rows": 0}, {"shard_rows": -1}, {"bogus": 1},
                      {"block_rows": "x"}, {"block_rows": 1.5}, {"block_rows": True},
                      "yes", [], {"block_rows": 4, "shard_rows": 2}]
EXTRAS: list[dict[str, Any]] = [{}, {"max_docs": 6}, {"source": "pydocs"},
                                {"use_titles": "no"}, {"name": "../up"}, {"split": 3}]


def _case(tmp_path: Path, stream: Any, extra: dict[str, Any]) -> Path:
    # bf16 weights only: vector quantization is refused on streamed corpora, in both
    data = recipe_data(tmp_path, candidates=[{"name": "bf16", "dtype": "bfloat16"}])
    spec = {**data["datasets"][0], "stream": stream, **extra}
    if spec["source"] == "pydocs":
        spec.pop("path")
    data["datasets"] = [spec]
    return recipes.write(tmp_path / "recipe.yaml", data)


@pytest.mark.parametrize("extra", EXTRAS)
@pytest.mark.parametrize("stream", STREAMS)
def test_validate_refuses_what_run_refuses(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                           monkeypatch: pytest.MonkeyPatch, stream: Any,
                                           extra: dict[str, Any]) -> None:
    recipe = _case(tmp_path, stream, extra)
    validated = run_cli(capsys, "validate", str(recipe))
    assert validated.code in (0, 2) and no_traceback(validated.err), validated.err

    def stop(*_args: Any, **_kwargs: Any) -> None:
        raise _WorkWouldStart

    monkeypatch.setattr(evaluate, "RunFolder", stop)
    try:
        run_recipe_file(recipe, progress=False)
        raise AssertionError("the run went past opening its folder")
    except _WorkWouldStart:
        ran = 0
    except InputError as exc:
        ran = 2
        assert str(recipe) in str(exc), exc
    assert validated.code == ran, (validated.err, ran)
    if ran == 2:
        assert f"{recipe}:" in validated.err  # at the recipe line, as run says it
