"""Fault class "a wait the socket layer cannot hold" (issue 32): ``http.timeout_s`` and
``startup_timeout_s`` took any positive float. ``.inf`` or ``1e12`` passed the plan, and
the first request of the run failed in the socket layer (OverflowError: timestamp out of
range), an exit 3 after the reference had encoded. They are exit 2 at plan time, naming
the field; a day is the longest wait."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from faultkit import no_traceback, run_cli, write_recipe

HTTP = {"url": "http://127.0.0.1:9"}
CASES: dict[str, tuple[dict[str, Any], str]] = {
    "openai timeout inf": ({"backend": "openai", "http": {**HTTP, "timeout_s": float("inf")}},
                           "http.timeout_s"),
    "tei timeout 1e12": ({"backend": "tei", "http": {**HTTP, "timeout_s": 1e12}},
                         "http.timeout_s"),
    "vllm startup nan": ({"backend": "vllm", "vllm": {"startup_timeout_s": float("nan")}},
                         "vllm.startup_timeout_s"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_infinite_or_huge_wait_is_refused_at_plan_time(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str) -> None:
    variant, field = CASES[case]
    path = write_recipe(tmp_path, candidates=[{"name": "remote", **variant}])
    result = run_cli(capsys, "validate", str(path))
    assert result.code == 2, result.err
    assert no_traceback(result.err) and str(path) in result.err
    assert f"candidates.0.{field}" in result.err, result.err


def test_a_day_is_still_a_wait(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_recipe(tmp_path, candidates=[
        {"name": "remote", "backend": "openai", "http": {**HTTP, "timeout_s": 86400}}])
    assert run_cli(capsys, "validate", str(path)).code == 0
