"""The results folder: strict JSON, exact round trips, atomic replacement."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from evalq.core.errors import InputError
from evalq.core.values import PerQuery
from evalq.results.folder import SCHEMA_VERSION, RunFolder, RunSummary, clean_json


def test_clean_json_turns_non_finite_into_null() -> None:
    data = clean_json({"a": math.nan, "b": [np.float32(1.5), np.inf], "c": np.int64(3)})
    assert data == {"a": None, "b": [1.5, None], "c": 3}
    json.dumps(data, allow_nan=False)


def test_per_query_values_round_trip_exactly(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    values = PerQuery(("q1", "q 2", "q\u00e93"), {"nDCG@10": rng.random(3),
                                               "overlap@10": np.array([1.0, math.nan, 0.3])})
    folder = RunFolder(tmp_path)
    folder.prepare()
    folder.write_per_query("ds", "v", values)
    back = folder.read_per_query("ds", "v")
    assert back.query_ids == values.query_ids
    assert np.array_equal(back.values["nDCG@10"], values.values["nDCG@10"])  # bit-exact
    assert np.isnan(back.values["overlap@10"][1])


def test_summary_is_replaced_atomically_and_stale_summary_moves_aside(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path)
    folder.prepare()
    folder.write_summary(RunSummary(schema_version=SCHEMA_VERSION, recipe="r", reference="ref",
                                    passed=True, datasets={}, variants={}))
    assert json.loads((tmp_path / "summary.json").read_text())["schema_version"] == SCHEMA_VERSION
    folder.prepare()  # a new run starts in the same folder
    assert not (tmp_path / "summary.json").exists()
    assert (tmp_path / "summary.previous.json").exists()
    assert not list(tmp_path.glob(".*.tmp"))


def test_reading_a_folder_that_is_not_finished_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError) as info:
        RunFolder(tmp_path).read_summary()
    assert "summary.json" in str(info.value)


def test_other_schema_versions_are_refused(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"schema_version": 99}))
    with pytest.raises(InputError) as info:
        RunFolder(tmp_path).read_summary()
    assert "schema_version 99" in str(info.value)


# -- the typed contract (results_schema) ---------------------------------------------------

@pytest.mark.model
@pytest.mark.slow
def test_every_folder_the_report_fixtures_write_parses(report_runs) -> None:
    from evalq.results.schema import RunManifest, RunSummary

    for name in ("small", "xss", "no_cosines", "other_slice"):
        folder = RunFolder(getattr(report_runs, name))
        summary, manifest = folder.read_summary(), folder.read_manifest()
        assert isinstance(summary, RunSummary) and isinstance(manifest, RunManifest)
        stored = json.loads((folder.root / "summary.json").read_text())
        # the model describes the file exactly: dumped back, nothing added or lost
        assert summary.model_dump(mode="json", exclude_unset=True) == stored
        assert manifest.status == "finished" and set(manifest.variants) == set(summary.variants)
    failed = RunFolder(report_runs.failed).read_manifest()
    assert failed.status == "failed" and failed.error


@pytest.mark.parametrize(("edit", "field"), [
    (lambda s: s["variants"]["dyn-int8"].update(passed="yes"), "variants.dyn-int8.passed"),
    (lambda s: s["datasets"]["pydocs"].update(queries=None), "datasets.pydocs.queries"),
    (lambda s: s["datasets"]["pydocs"]["variants"]["dyn-int8"]["metrics"]["nDCG@10"].update(
        value="0.5"), "datasets.pydocs.variants.dyn-int8.metrics.nDCG@10.value"),
    (lambda s: s["datasets"]["pydocs"]["variants"]["dyn-int8"].update(gate=[]),
     "datasets.pydocs.variants.dyn-int8.gate"),
    (lambda s: s.update(variants=None), "variants"),
])
@pytest.mark.parametrize("command", ["report", "gate", "compare", "api"])
def test_a_damaged_summary_is_exit_2_naming_the_file_and_field(
        report_runs, tmp_path: Path, capsys, edit, field: str, command: str) -> None:
    """A hand-edited summary.json reached the reports as an AttributeError (exit 3)."""
    import shutil

    import evalq
    from evalq.app.cli import main

    folder = tmp_path / "run"
    shutil.copytree(report_runs.small, folder)
    summary = json.loads((folder / "summary.json").read_text())
    edit(summary)
    (folder / "summary.json").write_text(json.dumps(summary))
    if command == "api":
        with pytest.raises(InputError) as info:
            evalq.load_results(folder)
        text = str(info.value)
    else:
        args = {"report": ["report", str(folder), "-o", str(tmp_path / "r.html")],
                "gate": ["gate", str(folder)],
                "compare": ["compare", str(report_runs.small), str(folder)]}[command]
        assert main(args) == 2
        text = capsys.readouterr().err
    assert str(folder / "summary.json") in text and f"'{field}'" in text


def test_a_damaged_manifest_is_exit_2_naming_the_field(report_runs, tmp_path: Path,
                                                       capsys) -> None:
    import shutil

    from evalq.app.cli import main

    folder = tmp_path / "run"
    shutil.copytree(report_runs.small, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["variants"]["fp32"]["role"] = "boss"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert main(["report", str(folder), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "manifest.json" in err and "'variants.fp32.role'" in err


@pytest.mark.parametrize(("edit", "field"), [
    (lambda m: m["variants"]["fp32"]["backend"].update(dtype=16), "variants.fp32.backend.dtype"),
    (lambda m: m["variants"]["fp32"]["timings"].update(peak_rss_mb="a lot"),
     "variants.fp32.timings.peak_rss_mb"),
    (lambda m: m["environment"].update(cpu_count="many"), "environment.cpu_count"),
    (lambda m: m["model"].update(path=["a"]), "model.path"),
])
def test_a_damaged_open_record_is_exit_2_when_the_manifest_is_read(
        report_runs, tmp_path: Path, capsys, edit, field: str) -> None:
    """What a report reads of an open record (a backend description, timings, the
    environment) is checked as the file is parsed: a value of the wrong type is a
    damaged file named with its field, not a TypeError in a report section (exit 3)."""
    import shutil

    from evalq.app.cli import main

    folder = tmp_path / "run"
    shutil.copytree(report_runs.small, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    edit(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert main(["report", str(folder), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert str(folder / "manifest.json") in err and f"'{field}'" in err


def test_damaged_texts_are_exit_2_naming_the_file(report_runs, tmp_path: Path) -> None:
    import shutil

    folder = tmp_path / "run"
    shutil.copytree(report_runs.small, folder)
    texts = sorted((folder / "texts").glob("*.json"))
    assert texts, "the report fixture stores texts/"
    data = json.loads(texts[0].read_text())
    assert RunFolder(folder).read_texts(texts[0].stem) is not None
    data["queries"] = {"q1": 7}
    texts[0].write_text(json.dumps(data))
    with pytest.raises(InputError) as info:
        RunFolder(folder).read_texts(texts[0].stem)
    assert str(texts[0]) in str(info.value) and "'queries.q1'" in str(info.value)


def test_schema_version_must_be_a_number(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"schema_version": "1"}))
    with pytest.raises(InputError, match="not a version number"):
        RunFolder(tmp_path).read_summary()


def test_json_schema_export(tmp_path: Path) -> None:
    from evalq.results.schema import write_json_schema

    paths = write_json_schema(tmp_path / "schema")
    assert sorted(p.name for p in paths) == ["load-summary.schema.json", "manifest.schema.json",
                                             "summary.schema.json"]
    summary = json.loads((tmp_path / "schema" / "summary.schema.json").read_text())
    assert summary["title"] == "RunSummary"
    assert {"datasets", "variants", "passed", "pipelines"} <= set(summary["properties"])
    assert "PipelineSummary" in summary["$defs"] and "SensitivitySection" in summary["$defs"]


def test_a_registered_migration_upgrades_an_older_folder(tmp_path: Path, monkeypatch) -> None:
    """The next format change registers one step; a folder written before it is upgraded
    before it is parsed, and a folder newer than this evalq is refused."""
    from evalq.results import schema as results_schema

    def rename(data: dict) -> dict:
        return {**data, "schema_version": 2, "renamed": data["old"]}

    monkeypatch.setattr(results_schema, "SCHEMA_VERSION", 2)
    monkeypatch.setitem(results_schema.MIGRATIONS, 1, rename)
    upgraded = results_schema.migrate({"schema_version": 1, "old": 5}, tmp_path / "x.json")
    assert upgraded == {"schema_version": 2, "old": 5, "renamed": 5}
    with pytest.raises(InputError, match="schema_version 3 is not supported"):
        results_schema.migrate({"schema_version": 3}, tmp_path / "x.json")
