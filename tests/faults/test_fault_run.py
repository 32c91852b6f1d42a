"""Fault classes during a real run (MiniLM on an 8-document BEIR set): an evalq bug (exit 3,
traceback in logs/), a full or read-only disk (exit 2), a corrupt cache chunk (warning,
recomputed, same results), invalid vectors (exit 2, never cached), a second concurrent
run (exit 2 naming the PID), stale files, and corrupt results given to `evalq gate`.
Every case checks that what had finished is still there."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from faultkit import no_traceback, run_cli, write_recipe

from evalq.app.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.model]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One finished run; tests copy its folder and cache before breaking them."""
    folder = tmp_path_factory.mktemp("finished")
    code = main(["run", str(write_recipe(folder))])
    assert code in (0, 1)
    return folder


def _copy(finished: Path, tmp_path: Path) -> Path:
    """A fresh work folder holding a copy of the finished cache and a recipe into out/."""
    shutil.copytree(finished / "cache", tmp_path / "cache")
    return write_recipe(tmp_path)


def _per_query(out: Path, variant: str) -> list[dict[str, Any]]:
    path = out / "per_query" / "tiny" / f"{variant}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_finished_files_are_readable_by_others_and_memory_is_per_variant(
        finished: Path) -> None:
    mask = os.umask(0)
    os.umask(mask)
    out = finished / "out"
    for name in ("manifest.json", "summary.json", "per_query/tiny/fp32.jsonl"):
        assert (out / name).stat().st_mode & 0o777 == 0o666 & ~mask
    chunk = next((finished / "cache" / "embeddings").glob("*/*.npy"))
    assert chunk.stat().st_mode & 0o777 == 0o666 & ~mask
    summary = json.loads((out / "summary.json").read_text())
    for info in summary["variants"].values():
        assert info["peak_rss_mb"] > 50
        assert "sampled" in info["peak_rss_method"]
    assert not (out / ".evalq.lock").exists()


def test_evalq_bug_exits_3_with_the_traceback_in_logs(
        finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import evalq.execute.evaluate

    def broken(*args: object, **kwargs: object) -> None:
        raise ZeroDivisionError("an injected bug in the statistics")

    # the name the run calls (evaluate imports it from summarize)
    monkeypatch.setattr(evalq.execute.evaluate, "build_summary", broken)
    result = run_cli(capsys, "run", str(_copy(finished, tmp_path)), folder=tmp_path / "out")
    assert result.code == 3
    assert "internal error (a bug in evalq" in result.err and no_traceback(result.err)
    manifest = result.manifest
    assert manifest["status"] == "failed" and manifest["error_kind"] == "evalq bug"
    log = Path(manifest["crash_log"])
    assert log.parent == tmp_path / "out" / "logs"
    text = log.read_text()
    assert "Traceback (most recent call last)" in text and "ZeroDivisionError" in text
    assert _per_query(tmp_path / "out", "int8-vectors")  # finished variants kept


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS])
def test_results_disk_refusing_is_exit_2(
        finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch, code: int) -> None:
    import evalq.results.folder

    def refuse(self: Any, dataset: str, variant: str, values: Any) -> None:
        path = self.root / "per_query" / dataset / f"{variant}.jsonl"
        raise OSError(code, os.strerror(code), str(path))

    monkeypatch.setattr(evalq.results.folder.RunFolder, "write_per_query", refuse)
    result = run_cli(capsys, "run", str(_copy(finished, tmp_path)), folder=tmp_path / "out")
    assert result.code == 2 and no_traceback(result.err)
    assert os.strerror(code) in result.err and "fp32.jsonl" in result.err
    assert "Fix:" in result.err
    assert result.manifest["status"] == "failed"


def test_full_disk_while_caching_keeps_finished_chunks_and_resumes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from evalq.encode.cache import EmbeddingCache

    real_put = EmbeddingCache.put
    calls = {"n": 0}

    def put(self: EmbeddingCache, key: str, array: np.ndarray) -> None:
        calls["n"] += 1
        if calls["n"] > 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path(key)))
        real_put(self, key, array)

    monkeypatch.setattr(EmbeddingCache, "put", put)
    recipe = write_recipe(tmp_path)
    result = run_cli(capsys, "run", str(recipe), folder=tmp_path / "out")
    assert result.code == 2 and "No space left on device" in result.err
    assert str(tmp_path / "cache") in result.err
    assert result.manifest["status"] == "failed"
    kept = list((tmp_path / "cache" / "embeddings").glob("*/*.npy"))
    assert len(kept) == 3
    monkeypatch.setattr(EmbeddingCache, "put", real_put)
    again = run_cli(capsys, "run", str(recipe), folder=tmp_path / "out")
    assert again.code in (0, 1)
    docs = again.manifest["variants"]["fp32"]["datasets"]["tiny"]["encode"]["documents"]
    assert docs["chunks_cached"] == 3  # the chunks written before the disk filled


def test_invalid_vectors_fail_the_variant_and_are_never_cached(
        tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    from evalq.engines.inprocess import InProcessEncoder

    real = InProcessEncoder.embed

    def nan_embed(self: InProcessEncoder, texts: Any) -> np.ndarray:
        vectors = real(self, texts).copy()
        vectors[0, 3] = np.nan
        return vectors

    monkeypatch.setattr(InProcessEncoder, "embed", nan_embed)
    result = run_cli(capsys, "run", str(write_recipe(tmp_path)), folder=tmp_path / "out")
    assert result.code == 2 and no_traceback(result.err)
    assert "unusable embeddings for document chunk 1 of" in result.err and "NaN" in result.err
    assert not list((tmp_path / "cache" / "embeddings").glob("*/*.npy"))
    assert result.manifest["status"] == "failed"


def test_flipped_bit_in_a_cached_chunk_is_detected_and_recomputed(
        finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = _copy(finished, tmp_path)
    chunks = sorted((tmp_path / "cache" / "embeddings").glob("*/*.npy"))
    target = chunks[0]
    data = bytearray(target.read_bytes())
    data[200] ^= 0x10  # one bit inside the vectors
    target.write_bytes(bytes(data))
    with pytest.warns(RuntimeWarning, match="failing its checksum"):
        result = run_cli(capsys, "run", str(recipe), folder=tmp_path / "out")
    assert result.code in (0, 1)
    for variant in ("fp32", "int8-vectors"):
        assert _per_query(tmp_path / "out", variant) == _per_query(finished / "out", variant)


def test_second_run_into_the_same_folder_names_the_first_pid(
        finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evalq.results.rundir import RunLock

    recipe = _copy(finished, tmp_path)
    lock = RunLock(tmp_path / "out")
    lock.acquire()
    try:
        result = run_cli(capsys, "run", str(recipe))
    finally:
        lock.release()
    assert result.code == 2 and f"PID {os.getpid()}" in result.err
    assert not (tmp_path / "out" / "manifest.json").exists()  # the first run's folder untouched


def test_rerun_removes_files_of_variants_no_longer_in_the_recipe(
        finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipe = _copy(finished, tmp_path)
    shutil.copytree(finished / "out", tmp_path / "out")
    for sub, suffix in (("per_query", ".jsonl"), ("runs", ".trec"), ("per_text", ".json")):
        (tmp_path / "out" / sub / "tiny" / f"bf16{suffix}").write_text("stale\n")
    result = run_cli(capsys, "run", str(recipe), folder=tmp_path / "out")
    assert result.code in (0, 1)
    assert not list((tmp_path / "out").glob("*/tiny/bf16.*"))
    assert "removed 3 file(s) of variants no longer in the recipe" in result.err


CORRUPTIONS = {
    "truncated summary": ("summary.json", lambda t: t[: len(t) // 2]),
    "manifest not json": ("manifest.json", lambda t: "{not json"),
    "manifest without variants": ("manifest.json",
                                  lambda t: json.dumps({k: v for k, v in json.loads(t).items()
                                                        if k != "variants"})),
    "truncated per-query file": ("per_query/tiny/int8-vectors.jsonl", lambda t: t[: len(t) // 2]),
    "garbage per-query line": ("per_query/tiny/fp32.jsonl", lambda t: t + "[1, 2]\n"),
    "summary is a list": ("summary.json", lambda t: "[]"),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_gate_on_corrupt_results_is_exit_2(finished: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str],
                                           case: str) -> None:
    out = tmp_path / "out"
    shutil.copytree(finished / "out", out)
    name, corrupt = CORRUPTIONS[case]
    (out / name).write_text(corrupt((out / name).read_text()))
    result = run_cli(capsys, "gate", str(out))
    assert result.code == 2, result.err
    assert no_traceback(result.err) and str(out) in result.err and "Fix:" in result.err


@pytest.mark.parametrize("where", ["inside a file", "a folder"])
def test_unwritable_junit_path_names_the_flag(finished: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str],
                                              where: str) -> None:
    blocker = tmp_path / "blocker"
    if where == "a folder":
        blocker.mkdir()
        junit = blocker
    else:
        blocker.write_text("x")
        junit = blocker / "junit.xml"
    result = run_cli(capsys, "gate", str(finished / "out"), "--junit", str(junit))
    assert result.code == 2 and "field '--junit'" in result.err and no_traceback(result.err)


@pytest.mark.parametrize("flag", ["--markdown", "--junit"])
@pytest.mark.parametrize("where", ["under a file", "a folder"])
def test_an_output_under_a_file_says_so(finished: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str], flag: str,
                                        where: str) -> None:
    """Issue 32 (gate_markdown_under_file): ``--markdown afile/s.md`` said only 'cannot write
    the markdown summary (File exists)'; it names the file in the way, before any work."""
    afile = tmp_path / "afile"
    if where == "a folder":
        afile.mkdir()
        target = afile
    else:
        afile.write_text("x")
        target = afile / "s.out"
    result = run_cli(capsys, "gate", str(finished / "out"), flag, str(target))
    assert result.code == 2 and f"field '{flag}'" in result.err, result.err
    assert ("is a file, so no file can be created under it" in result.err
            or "it is a folder, not a file"
            in result.err), result.err
    assert "File exists" not in result.err and no_traceback(result.err)
