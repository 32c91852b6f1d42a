"""TREC / BEIR-tsv qrels and TREC run files: detection, round trips, and every error path."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from evalq.core.dataset import Qrels
from evalq.core.errors import InputError
from evalq.data.trec import detect_qrels_format, read_qrels, read_run, write_qrels, write_run


def write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def test_reads_trec_qrels_with_string_ids(tmp_path: Path) -> None:
    path = write(tmp_path / "q.txt", "001 0 0042 1\n001 0 d2 2\n\n2 Q0 d1 0\n")
    qrels = read_qrels(path)
    assert qrels.judgments == {"001": {"0042": 1, "d2": 2}, "2": {"d1": 0}}
    assert detect_qrels_format(path) == "trec"


def test_reads_beir_tsv_with_header(tmp_path: Path) -> None:
    path = write(tmp_path / "test.tsv", "query-id\tcorpus-id\tscore\n1\t01\t1\n1\t02\t0\n")
    assert read_qrels(path).judgments == {"1": {"01": 1, "02": 0}}
    assert detect_qrels_format(path) == "beir"


def test_round_trip_both_formats(tmp_path: Path) -> None:
    qrels = Qrels({"q1": {"d1": 2, "d2": 0}, "q2": {"d3": 1}})
    for fmt in ("trec", "beir"):
        out = tmp_path / f"out.{fmt}"
        write_qrels(qrels, out, fmt=fmt)
        assert read_qrels(out).judgments == qrels.judgments
        assert detect_qrels_format(out) == fmt


def test_integral_float_relevance_accepted(tmp_path: Path) -> None:
    path = write(tmp_path / "q.txt", "q 0 d 2.0\n")
    assert read_qrels(path).judgments == {"q": {"d": 2}}


@pytest.mark.parametrize(
    ("text", "line", "field", "needle"),
    [
        ("q 0 d 1\nq 0 d\n", 2, None, "expected 4"),
        ("q d 1\n", 1, None, "header"),  # 3 columns without the BEIR header
        ("q 0 d high\n", 1, "rel", "not an integer"),
        ("q 0 d 1.5\n", 1, "rel", "not an integer"),
        ("query-id\tcorpus-id\tscore\nq\td\n", 2, None, "expected 3"),
        ("query-id\tcorpus-id\tscore\nq\td\tx\n", 2, "score", "not an integer"),
        ("q 0 d 1\nq 0 d 2\n", 2, "rel", "twice"),
    ],
)
def test_malformed_qrels_name_file_line_field(
    tmp_path: Path, text: str, line: int, field: str | None, needle: str
) -> None:
    path = write(tmp_path / "bad.qrels", text)
    with pytest.raises(InputError) as info:
        read_qrels(path)
    error = info.value
    assert Path(error.file) == path and error.line == line and error.field == field
    assert needle in str(error) and str(path) in str(error) and error.fix


def test_repeated_identical_judgment_is_counted_once_with_warning(tmp_path: Path) -> None:
    path = write(tmp_path / "q.txt", "q 0 d 1\nq 0 d 1\n")
    with pytest.warns(UserWarning, match="repeated"):
        assert read_qrels(path).judgments == {"q": {"d": 1}}


def test_non_utf8_bytes_report_the_line(tmp_path: Path) -> None:
    path = write(tmp_path / "q.txt", b"q 0 d 1\nq 0 caf\xe9 1\n")
    with pytest.raises(InputError) as info:
        read_qrels(path)
    assert info.value.line == 2 and "UTF-8" in str(info.value)


def test_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not found"):
        read_qrels(tmp_path / "absent.txt")
    with pytest.raises(InputError, match="no judgments"):
        read_qrels(write(tmp_path / "empty.tsv", "query-id\tcorpus-id\tscore\n"))


def test_write_rejects_ids_with_whitespace(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="whitespace"):
        write_qrels(Qrels({"q 1": {"d": 1}}), tmp_path / "x.txt")
    assert not (tmp_path / "x.txt").exists()


def test_run_round_trip_in_trec_eval_order(tmp_path: Path) -> None:
    run = {"q1": {"d1": 0.5, "d2": 0.5, "d3": 0.9}, "q2": {"d9": -1.25}}
    path = tmp_path / "run.trec"
    write_run(run, path, tag="sys")
    lines = path.read_text().splitlines()
    # equal scores: document id descending, as trec_eval orders them
    assert [line.split()[2] for line in lines[:3]] == ["d3", "d2", "d1"]
    assert [line.split()[3] for line in lines[:3]] == ["1", "2", "3"]
    assert read_run(path) == run


@pytest.mark.parametrize(
    ("text", "field", "needle"),
    [
        ("q Q0 d 1 0.5\n", None, "expected 6"),
        ("q Q0 d one 0.5 t\n", "rank", "rank"),
        ("q Q0 d 1 nan t\n", "score", "finite"),
        ("q Q0 d 1 0.5 t\nq Q0 d 2 0.4 t\n", "docid", "twice"),
    ],
)
def test_malformed_run_lines(tmp_path: Path, text: str, field: str | None, needle: str) -> None:
    path = write(tmp_path / "run.txt", text)
    with pytest.raises(InputError) as info:
        read_run(path)
    assert info.value.field == field and needle in str(info.value)
    assert info.value.line == text.count("\n")


def test_reading_emits_no_warning_on_clean_files(tmp_path: Path) -> None:
    path = write(tmp_path / "q.txt", "q 0 d 1\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        read_qrels(path)
