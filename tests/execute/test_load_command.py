"""`evalq load` end to end against local test servers (no model server: the aiohttp
stand-in answers with constant vectors, so parity is off here; the real vLLM and
Infinity runs are ``recipes/load-cpu.yaml``), and the recipe checks that refuse bad
input with exit 2 before any traffic is sent."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from evalq.app.cli import main
from evalq.results.load import LOAD_SCHEMA_VERSION, LoadFolder
from support import recipes
from support.load_test_server import Behaviour, LoadTestServer
from support.summaries import summary

HERE = Path(__file__).resolve().parents[1]  # tests/
FAST = {"warmup_s": 0.2, "duration_s": 0.6, "max_requests": 200, "timeout_s": 3,
        "parity": False}


def _recipe(tmp_path: Path, url: str, load: dict[str, Any], **extra: Any) -> Path:
    """``extra``: top-level keys that replace the defaults here."""
    recipe = recipes.recipe(
        "load-test", datasets=["pydocs"], queries=20, docs=40,
        reference={"name": "fp32", "backend": "inprocess"},
        candidates=[{"name": "srv", "backend": "openai", "http": {"url": url, "model": "test"}}],
        load={**FAST, **load})
    return recipes.write(tmp_path / "recipe.yaml", {**recipe, **extra})


def _load(tmp_path: Path, recipe: Path, *extra: str) -> int:
    # datasets/ manifests are found from the working directory (the repo root in CI)
    return main(["load", str(recipe), "-o", str(tmp_path / "out"), *extra])


def _summary(tmp_path: Path) -> dict[str, Any]:
    return LoadFolder(tmp_path / "out").read_summary()


QUERY = {"name": "query", "kind": "query", "slo_p99_ms": 2000,
         "open_loop": {"rates": [20, 40]}}


@pytest.fixture(autouse=True)
def _repo_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(HERE.parent)


def test_full_run_writes_steps_knees_plan_and_decision(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with LoadTestServer(Behaviour(delay_ms=2)) as server:
        recipe = _recipe(tmp_path, server.url, {"workloads": [
            QUERY,
            {"name": "ingest", "kind": "ingest", "slo_p99_ms": 2000, "batch_sizes": [2, 4],
             "closed_loop": {"concurrency": [1, 2]}},
            {"name": "rerank", "kind": "rerank", "slo_p99_ms": 2000, "depth": 5,
             "endpoint": "/rerank", "open_loop": {"rates": [10]}},
        ]}, capacity={"target_qps": 30, "rerank_depth": 10, "ingest_docs_per_day": 86400,
                      "dollars_per_replica_hour": 2.0, "headroom": 1.0})
        (tmp_path / "out").mkdir()
        (tmp_path / "out" / "summary.json").write_text(json.dumps(summary(
            {"fp32": {"role": "reference"},
             "srv": {"role": "candidate", "passed": True, "verdict": "pass"}})))
        assert _load(tmp_path, recipe) == 0
    s = _summary(tmp_path)
    assert s["schema_version"] == LOAD_SCHEMA_VERSION and s["status"] == "finished"
    assert s["skipped_variants"] == {"fp32": "backend 'inprocess' runs inside evalq; "
                                             "there is no server to load"}
    v = s["variants"]["srv"]
    assert v["started_by_evalq"] is False
    assert v["server_settings"]["batch"] == {"max_model_len": 256, "batch_size": 32}
    query = v["workloads"]["query"]
    assert [st["verdict"] for st in query["steps"]] == ["pass", "pass"]
    assert query["knee"] == {"per_s": 40.0, "unit": "requests/s", "lower_bound": True,
                             "series": "query", "reason": "", "level": 40.0}
    ingest = v["workloads"]["ingest"]
    assert {st["series"] for st in ingest["steps"]} == {"batch=2", "batch=4"}
    assert ingest["knee"]["unit"] == "texts/s" and ingest["knee"]["per_s"] > 0
    rerank = v["workloads"]["rerank"]["steps"][0]
    assert rerank["pairs_per_s"] == pytest.approx(5 * rerank["achieved_rps"])
    # every measured request is in the step's stored histogram
    steps = LoadFolder(tmp_path / "out").read_steps("srv", "query")
    assert all(st["histogram"]["count"] == st["ok"] == st["sent"] for st in steps)
    plan = v["plan"]
    assert plan["feasible"] and plan["replicas"] >= 1
    expected = 30 / 40 + 30 * 10 / v["workloads"]["rerank"]["knee"]["per_s"] \
        + 1.0 / ingest["knee"]["per_s"]
    assert plan["load"] == pytest.approx(expected)
    row = s["decision"][0]
    assert row["quality"] == "pass" and row["variant"] == "srv"
    assert row["dollars_per_hour"] == 2.0 * plan["replicas"]
    assert "srv" in s["recommendation"]

    # --plan-only: a new target and a new quality verdict, the same knees, no traffic
    data = yaml.safe_load(recipe.read_text())
    data["capacity"]["target_qps"] = 300
    recipe.write_text(yaml.safe_dump(data))
    (tmp_path / "out" / "summary.json").write_text(json.dumps(summary(
        {"fp32": {"role": "reference"},
         "srv": {"role": "candidate", "passed": False, "verdict": "fail"}})))
    assert _load(tmp_path, recipe, "--plan-only") == 0
    again = _summary(tmp_path)
    assert again["variants"]["srv"]["workloads"] == v["workloads"]
    assert again["variants"]["srv"]["plan"]["load"] == pytest.approx(
        expected + 270 / 40 + 270 * 10 / v["workloads"]["rerank"]["knee"]["per_s"])
    assert again["decision"][0]["quality"] == "fail" and again["recommendation"] is None

    # a damaged load/summary.json is exit 2 naming the file and the field (was exit 3)
    load_summary = tmp_path / "out" / "load" / "summary.json"
    damaged = json.loads(load_summary.read_text())
    damaged["variants"]["srv"]["workloads"]["query"]["knee"]["per_s"] = "fast"
    load_summary.write_text(json.dumps(damaged))
    capsys.readouterr()
    assert _load(tmp_path, recipe, "--plan-only") == 2
    err = capsys.readouterr().err
    assert str(load_summary) in err and "'variants.srv.workloads.query.knee.per_s'" in err


def test_slo_broken_at_the_first_step_stops_the_sweep_and_exits_1(tmp_path: Path) -> None:
    with LoadTestServer(Behaviour(delay_ms=150)) as server:
        recipe = _recipe(tmp_path, server.url, {"workloads": [
            {**QUERY, "slo_p99_ms": 50, "open_loop": {"rates": [5, 10, 20]}}]},
            capacity={"target_qps": 10})
        assert _load(tmp_path, recipe) == 1
    w = _summary(tmp_path)["variants"]["srv"]["workloads"]["query"]
    assert len(w["steps"]) == 1 and w["steps"][0]["verdict"] == "slo"
    assert w["knee"]["per_s"] is None
    assert _summary(tmp_path)["decision"][0]["feasible"] is False


def test_server_errors_mid_test_are_counted_marked_and_exit_1(tmp_path: Path) -> None:
    with LoadTestServer(Behaviour(fail_every=4)) as server:
        recipe = _recipe(tmp_path, server.url, {"workloads": [QUERY],
                                                "stop_on_break": False})
        assert _load(tmp_path, recipe) == 1
        failed = server.counters.failed
    steps = _summary(tmp_path)["variants"]["srv"]["workloads"]["query"]["steps"]
    assert len(steps) == 2  # the run went on past the broken step
    assert all(st["verdict"] == "errors" for st in steps)
    assert 0 < sum(st["errors"]["http_5xx"] for st in steps) <= failed


@pytest.mark.process
@pytest.mark.server
def test_launched_server_is_watched_and_its_death_is_marked(tmp_path: Path) -> None:
    port = _free_port()
    command = [sys.executable, str(HERE / "support" / "load_test_server.py"), "--port", "{port}",
               "--die-after", "60"]
    recipe = _recipe(tmp_path, f"http://127.0.0.1:{port}",
                     {"workloads": [{**QUERY, "open_loop": {"rates": [40, 60, 80]}}],
                      "launch": {"srv": {"command": command, "startup_timeout_s": 60}}})
    assert _load(tmp_path, recipe) == 1
    v = _summary(tmp_path)["variants"]["srv"]
    assert v["started_by_evalq"] is True
    steps = v["workloads"]["query"]["steps"]
    assert steps[0]["server"]["cpu_s"] is not None and steps[0]["server"]["peak_rss_mb"] > 0
    assert steps[-1]["verdict"] == "server_died"
    assert any("server died" in b for b in _summary(tmp_path)["broken"])


@pytest.mark.process
def test_server_that_never_starts_is_exit_2_naming_url_and_log(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = _free_port()
    recipe = _recipe(tmp_path, f"http://127.0.0.1:{port}", {"workloads": [QUERY], "launch": {
        "srv": {"command": [sys.executable, "-c", "import sys; print('boom'); sys.exit(3)"]}}})
    assert _load(tmp_path, recipe) == 2
    err = capsys.readouterr().err
    assert f"127.0.0.1:{port}" in err and "srv.log" in err and "boom" in err
    assert _summary(tmp_path)["status"] == "failed"


def test_ctrl_c_keeps_the_finished_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    import evalq.execute.load.command as command

    def interrupt_after_first_step(text: str) -> None:
        if "-> pass" in text:
            raise KeyboardInterrupt

    monkeypatch.setattr(command, "_log", interrupt_after_first_step)
    with LoadTestServer() as server:
        recipe = _recipe(tmp_path, server.url, {"workloads": [QUERY]})
        assert _load(tmp_path, recipe) == 130
    s = _summary(tmp_path)
    assert s["status"] == "interrupted"
    assert len(s["variants"]["srv"]["workloads"]["query"]["steps"]) == 1
    assert len(LoadFolder(tmp_path / "out").read_steps("srv", "query")) == 1
    assert "finished steps" in capsys.readouterr().err


# -- bad input: exit 2 before any traffic -------------------------------------------------


def _expect_2(tmp_path: Path, recipe: Path, capsys: pytest.CaptureFixture[str],
              *needles: str) -> None:
    assert _load(tmp_path, recipe) == 2
    err = capsys.readouterr().err
    for needle in needles:
        assert needle in err, err


def test_non_loopback_host_is_refused_unless_allowed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = _recipe(tmp_path, "http://10.1.2.3:8000", {"workloads": [QUERY]})
    _expect_2(tmp_path, recipe, capsys, "candidates.0.http.url", "not on this machine",
              "load.allow_hosts")
    from evalq.recipe.plan_load import check_load
    from evalq.recipe.schema import recipe_from_located
    from evalq.recipe.yamlsource import load_yaml

    allowed = _recipe(tmp_path, "http://10.1.2.3:8000",
                      {"workloads": [QUERY], "allow_hosts": ["10.1.2.3"]})
    located = load_yaml(allowed)
    plan = check_load(recipe_from_located(located, allowed), located, allowed, None)
    assert [v.name for v in plan.variants] == ["srv"]  # checked only; nothing sent


def test_rerank_without_a_route_explains_why_it_cannot_run(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = _recipe(tmp_path, "http://127.0.0.1:9", {"workloads": [
        {"name": "rr", "kind": "rerank", "slo_p99_ms": 100, "depth": 50,
         "open_loop": {"rates": [1]}}]})
    _expect_2(tmp_path, recipe, capsys, "load.workloads.0", "cannot run yet",
              "endpoint: /rerank")


@pytest.mark.parametrize(("load", "needles"), [
    ({"workloads": [{**QUERY, "open_loop": {"rates": [10, 5]}}]}, ["strictly ascending"]),
    ({"workloads": [{**QUERY, "closed_loop": {"concurrency": [1]}}]}, ["exactly one of"]),
    ({"workloads": [{"name": "i", "kind": "ingest", "slo_p99_ms": 9,
                     "closed_loop": {"concurrency": [1]}}]}, ["needs batch_sizes"]),
    ({"workloads": [QUERY], "warmup": 1}, ["unknown key 'warmup'", "warmup_s"]),
    ({"workloads": [QUERY], "variants": ["nope"]}, ["unknown variant 'nope'"]),
    ({"workloads": [QUERY], "variants": ["fp32"]}, ["not served over HTTP"]),
])
def test_recipe_errors_name_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                      load: dict[str, Any], needles: list[str]) -> None:
    _expect_2(tmp_path, _recipe(tmp_path, "http://127.0.0.1:9", load), capsys, *needles)


def test_no_load_section_and_unknown_only(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    recipe = _recipe(tmp_path, "http://127.0.0.1:9", {"workloads": [QUERY]})
    assert _load(tmp_path, recipe, "--only", "ghost") == 2
    err = capsys.readouterr().err
    assert "--only" in err and "choose from srv" in err
    data = yaml.safe_load(recipe.read_text())
    del data["load"]
    recipe.write_text(yaml.safe_dump(data))
    _expect_2(tmp_path, recipe, capsys, "no 'load:' section")


def _free_port() -> int:
    from evalq.engines.vllm_server import free_port

    return free_port()


def test_built_in_recipe_names_resolve_as_for_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """`evalq load recipes/load-cpu.yaml` is the docs' command (docs/load-testing.md): from
    any folder it names the built-in recipe (it said "file not found" outside the source
    tree's root)."""
    monkeypatch.chdir(tmp_path)
    for command in (["load", "recipes/quickstart.yaml"],
                    ["load", "quickstart", "--plan-only", "-o", str(tmp_path / "none")]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "file not found" not in err
    assert main(["load", "recipes/quickstart.yaml"]) == 2
    assert "no 'load:' section" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.process
@pytest.mark.server
def test_run_starts_the_launched_server_before_probing_it(tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]
                                                          ) -> None:
    """`evalq run` on a recipe whose load.launch starts a variant's server: the start-of-run
    HTTP probe must wait for that server (it said "connection refused", exit 2, before)."""
    port = _free_port()
    command = [sys.executable, str(HERE / "support" / "load_test_server.py"), "--port", "{port}",
               "--dim", "384"]
    recipe = _recipe(tmp_path, f"http://127.0.0.1:{port}",
                     {"workloads": [QUERY],
                      "launch": {"srv": {"command": command, "startup_timeout_s": 60}}},
                     max_queries=5, max_docs=10, parity={"enabled": False})
    code = main(["run", str(recipe), "-o", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code in (0, 1), err
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    probe = manifest["http_probe"]["srv"]
    assert "deferred" not in probe and probe["endpoint"].endswith("/embeddings")
    assert "[evalq] probe srv" in err
    with pytest.raises(OSError):  # the launched server is gone after the run
        import socket
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
