"""``evalq load`` claims no capacity it never delivered (issue 32, item 5).

``rates: [1e9]`` with ``max_requests: 20`` "offers" 20 requests in 20 ns; the stand-in
server answers them in tens of milliseconds. That level was never sustained: it must be
reported as ``unsustained``, give no knee (not "≥1000000000 req/s") and no capacity plan
(not "1 replicas, $0.00 per 1M queries")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evalq.app.cli import main
from evalq.execute.load.capacity import SUSTAIN_LAG_SHARE, unsustained
from evalq.results.load import LoadFolder
from support import recipes
from support.load_test_server import Behaviour, LoadTestServer

HERE = Path(__file__).resolve().parents[1]


def _figures(lag_p99_ms: float = 1.0, **changes: Any) -> dict[str, Any]:
    base = {"mode": "open", "sent": 100, "ok": 100, "offered_realized_rps": 50.0,
            "achieved_rps": 49.0, "generator": {"lag_ms": {"p99": lag_p99_ms}}}
    return {**base, **changes}


def test_a_delivered_level_counts() -> None:
    assert unsustained(_figures()) is None  # 100 requests over 2 s, sent 1 ms late
    assert unsustained(_figures(lag_p99_ms=0.99 * SUSTAIN_LAG_SHARE * 2000)) is None
    assert unsustained({"mode": "closed", "concurrency": 4, "achieved_rps": 1.0}) is None


@pytest.mark.parametrize("figures", [
    _figures(lag_p99_ms=1.01 * SUSTAIN_LAG_SHARE * 2000),  # the generator fell behind
    _figures(sent=20, offered_realized_rps=1e9),  # 20 ns offered
    _figures(sent=1, offered_realized_rps=1e6),  # 1 µs offered
    _figures(offered_realized_rps=None),
])
def test_an_undelivered_level_is_unsustained(figures: dict[str, Any]) -> None:
    why = unsustained(figures)
    assert why is not None and why.startswith("unsustained")


@pytest.fixture
def _repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(HERE.parent)  # datasets/ manifests are found from the repo root


@pytest.mark.usefixtures("_repo_root")
def test_a_rate_never_delivered_gives_no_knee_and_no_plan(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with LoadTestServer(Behaviour(delay_ms=5)) as server:
        recipe = recipes.write(tmp_path / "recipe.yaml", recipes.recipe(
            "load-sustain", datasets=["pydocs"], queries=20, docs=40,
            reference={"name": "fp32", "backend": "inprocess"},
            candidates=[{"name": "srv", "backend": "openai",
                         "http": {"url": server.url, "model": "test"}}],
            load={"warmup_s": 0, "duration_s": 1, "max_requests": 20, "timeout_s": 5,
                  "parity": False,
                  "workloads": [{"name": "query", "kind": "query", "slo_p99_ms": 5000,
                                 "open_loop": {"rates": [1e9]}}]},
            capacity={"target_qps": 100, "dollars_per_replica_hour": 2.0}))
        code = main(["load", str(recipe), "-o", str(tmp_path / "out")])
    out = capsys.readouterr()
    assert code == 1, out.out + out.err
    query = LoadFolder(tmp_path / "out").read_summary()["variants"]["srv"]["workloads"]["query"]
    step = query["steps"][0]
    assert step["verdict"] == "unsustained"
    assert step["ok"] == 20  # the server answered: it was the level that was not real
    assert any("unsustained" in r for r in step["reasons"])
    assert query["knee"]["per_s"] is None
    assert "not sustained" in query["knee"]["reason"]
    text = out.out + out.err
    assert "1000000000" not in text and "$0.00" not in text
    assert "infeasible" in text and "1 replicas" not in text
