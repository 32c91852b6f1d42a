"""bench/cpu_formats.py's side of sentence-transformers' int8 peers, without their venv.

The peers run in ``.venv-stpeer`` (``make stpeer-venv``), which ``make test`` never builds;
what the bench does with them is checked here: the row it accepts from a peer, the stop
(with the way to build the venv) when the venv is missing, the ratio to the fastest peer,
the setting each numerics class exports at, and that the suite's targets do not need it.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"


def _load(name: str) -> ModuleType:
    """A bench script as a module (bench/ on sys.path for its ``from record import``)."""
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


@pytest.fixture(scope="module")
def cpu_formats() -> ModuleType:
    return _load("cpu_formats")


@pytest.fixture(scope="module")
def st_peer() -> ModuleType:
    return _load("st_peer")


ROW = ('{"seconds": 2.0, "cpu_seconds": 3.9, "docs_per_s": 128.0, "peak_rss_mib": 900.5, '
       '"weight_bytes": 22966011, "inference_precision": "bf16"}')


def test_a_peer_row_is_the_json_object_on_its_last_line(cpu_formats: ModuleType) -> None:
    row = cpu_formats.parse_row("st-ov-qint8", f"exporting...\nwarning: x\n{ROW}\n",
                                cpu_formats.ROW_KEYS)
    assert row["docs_per_s"] == 128.0
    assert row["inference_precision"] == "bf16"


@pytest.mark.parametrize(("stdout", "said"), [
    ("", "printed no JSON object"),
    ("Traceback...\nValueError: boom\n", "printed no JSON object"),
    ("[1, 2]\n", "printed no JSON object"),
    ('{"seconds": 2.0, "docs_per_s": 128.0}\n', "without cpu_seconds, peak_rss_mib, "
     "weight_bytes"),
])
def test_a_peer_row_without_its_figures_stops_the_bench_naming_the_peer(
        cpu_formats: ModuleType, stdout: str, said: str) -> None:
    with pytest.raises(SystemExit) as stop:
        cpu_formats.parse_row("st-onnx-qint8", stdout, cpu_formats.ROW_KEYS)
    assert str(stop.value).startswith("st-onnx-qint8 ")
    assert said in str(stop.value)


def test_a_missing_peer_venv_stops_the_bench_and_says_how_to_build_it(
        cpu_formats: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as stop:
        cpu_formats.peer_python({"EVALQ_STPEER_VENV": str(tmp_path / "nowhere")})
    message = str(stop.value)
    assert str(tmp_path / "nowhere") in message
    assert "make stpeer-venv" in message and "--no-peers" in message


def test_the_peer_venv_is_found_where_the_variable_points(cpu_formats: ModuleType,
                                                           tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python").write_text("")
    assert cpu_formats.peer_python({"EVALQ_STPEER_VENV": str(tmp_path)}) == \
        tmp_path / "bin" / "python"


def test_without_the_variable_the_peer_venv_is_the_repository_s(
        cpu_formats: ModuleType) -> None:
    expected = REPO / ".venv-stpeer" / "bin" / "python"
    if expected.exists():  # `make bench` built it here
        assert cpu_formats.peer_python({}) == expected
        return
    with pytest.raises(SystemExit) as stop:  # a fresh clone: the bench says how to build it
        cpu_formats.peer_python({})
    assert str(REPO / ".venv-stpeer") in str(stop.value) and "make stpeer-venv" in str(
        stop.value)


def _rows(**docs_per_s: float) -> dict[str, dict[str, Any]]:
    return {name.replace("_", "-"): {"docs_per_s": v} for name, v in docs_per_s.items()}


def test_evalq_int8_formats_are_measured_against_the_fastest_peer(
        cpu_formats: ModuleType) -> None:
    best = _rows(torch_fp32=30.0, ov_fp32=60.0, ov_int8=150.0, ort_int8_dynamic=90.0,
                 st_onnx_qint8=75.0, st_ov_qint8=120.0, st_ov_qint8_f32=125.0)
    versus = cpu_formats.against_st(best)
    assert versus["fastest_st_int8"] == "st-ov-qint8-f32"
    assert versus["fastest_evalq_int8"] == "ov-int8"
    assert versus["over_fastest_st_int8"] == {"ov-int8": 1.2, "ort-int8-dynamic": 0.72}


def test_without_peers_there_is_no_comparison(cpu_formats: ModuleType) -> None:
    assert cpu_formats.against_st(_rows(torch_fp32=30.0, ov_int8=150.0)) == {}


# The file names sentence-transformers 5.1.2 writes (``model_<weight type>_<setting>``):
# optimum's ``avx2`` setting quantizes weights unsigned, the others signed. The bench once
# looked for ``model_qint8_avx2.onnx`` on an AVX2-only CPU and found nothing.
@pytest.mark.parametrize(("numerics_class", "setting", "file"), [
    ("x86-64/avx512-vnni", "avx512_vnni", "model_qint8_avx512_vnni"),
    ("x86-64/amx", "avx512_vnni", "model_qint8_avx512_vnni"),
    ("x86-64/avx512", "avx512", "model_qint8_avx512"),
    ("x86-64/avx2", "avx2", "model_quint8_avx2"),
    ("x86-64/avx2-vnni", "avx2", "model_quint8_avx2"),
    ("x86-64/sse", "avx2", "model_quint8_avx2"),
    ("arm64/neon", "arm64", "model_qint8_arm64"), ("arm64/sve", "arm64", "model_qint8_arm64"),
])
def test_the_onnx_peer_exports_at_the_setting_named_for_its_class(
        st_peer: ModuleType, numerics_class: str, setting: str, file: str) -> None:
    assert st_peer.onnx_config(numerics_class) == setting
    assert st_peer.onnx_file(numerics_class) == f"onnx/{file}.onnx"


def test_a_failed_childs_error_is_shown_not_a_list_it_printed(
        cpu_formats: ModuleType) -> None:
    stderr = ("Traceback (most recent call last):\n  File \"x.py\", line 1\n"
              "ValueError: Unrecognized model in /m. Should have one of: " + "bert, " * 900
              + "\n")
    shown = cpu_formats.stderr_tail(stderr)
    assert "Traceback" in shown and "ValueError: Unrecognized model" in shown
    assert len(shown) < 1000


def test_the_bench_and_the_peer_script_name_the_same_peers(cpu_formats: ModuleType,
                                                            st_peer: ModuleType) -> None:
    assert tuple(st_peer.PEERS) == cpu_formats.ST_PEERS


def _prerequisites(makefile: str, target: str) -> str:
    found = re.search(rf"^{re.escape(target)}:(.*)$", makefile, re.MULTILINE)
    assert found, f"no {target} target"
    return found.group(1)


def test_the_suite_never_builds_the_peer_venv_and_the_bench_does() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    for target in ("test", "test-fast", "demo"):
        assert "stpeer" not in _prerequisites(makefile, target), target
    assert "stpeer-venv" in _prerequisites(makefile, "bench")
