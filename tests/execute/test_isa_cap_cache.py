"""A cache made under one numerics class is not served under another: shown with a real
run under a capped instruction set.

The same small slice (real MiniLM, fp32 against OpenVINO NNCF int8) runs three times on
one cache folder, each in its own process, since oneDNN and torch read their caps once
when they load: first as this machine is, then with the kernels capped to a lower
instruction set through the engines' documented variables (``ONEDNN_MAX_CPU_ISA`` for
oneDNN and so OpenVINO, ``ATEN_CPU_CAPABILITY`` for torch), then as this machine is
again. evalq reads the same variables (``core.host``), so the capped process records the
class its kernels ran and keys its int8 vectors by it.

The pair of classes comes from what this machine has: an AVX-512 (or AVX2-VNNI, AMX)
host is capped to AVX2, an AVX2-only host to AVX (the class ``x86-64/sse``: no AVX2
kernels), so the test shows the same thing on either CI machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evalq.core import host
from support import recipes

ROOT = Path(__file__).resolve().parents[2]
INT8 = "ov-int8"
# How far the int8 candidate's numbers may move between two instruction sets. The
# kernels round differently (VNNI's int32 dot products against AVX2's saturating 16-bit
# pair sums; measured on AVX-512 VNNI vs capped AVX2: mean cosine to fp32 0.998 vs
# 0.995, nDCG@10 0.963 vs 0.975 on 20 queries), so the runs agree to a few parts in a
# thousand per vector, and a query's ranking may move by a swap or two, not to the last
# digit.
COSINE_TOLERANCE = 0.01  # mean cosine to fp32, between the two classes
METRIC_TOLERANCE = 0.05  # a mean over 20 queries: one query moving by one rank
MIN_COSINE = 0.98  # each class's int8 vectors stay this close to fp32


def lower_cap(klass: str) -> tuple[dict[str, str], str] | None:
    """The caps that lower this machine's class, and the class they give, or None where
    there is nothing lower to cap to (an SSE-only x86 host, or another architecture,
    whose engines document no such cap)."""
    if klass in ("x86-64/amx", "x86-64/avx512-vnni", "x86-64/avx512", "x86-64/avx2-vnni"):
        return {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}, "x86-64/avx2"
    if klass == "x86-64/avx2":
        # AVX, not SSE41: OpenVINO's CPU plugin refuses MiniLM's MVN node under an SSE4.1
        # cap ("MVN node ... bad combination"), and runs it under AVX (no AVX2 kernels).
        return ({"ONEDNN_MAX_CPU_ISA": "AVX", "ATEN_CPU_CAPABILITY": "default"},
                "x86-64/sse")
    return None


def test_lower_cap_always_lowers_the_class_it_names() -> None:
    """The pair the slow test uses is what host.py derives from the caps (checked on a
    made-up CPU of each class, so it holds whatever CPU runs it)."""
    flags = {"x86-64/amx": ("amx_tile", "amx_int8", "avx512f", "avx512bw", "avx512vl",
                            "avx512_vnni", "avx2", "fma"),
             "x86-64/avx512-vnni": ("avx512f", "avx512bw", "avx512vl", "avx512_vnni",
                                    "avx2", "fma"),
             "x86-64/avx2-vnni": ("avx2", "fma", "avx_vnni"),
             "x86-64/avx2": ("avx2", "fma")}
    for klass, cpu_flags in flags.items():
        cpu = host.CpuInfo(arch="x86-64", vendor=None, model=None, flags=cpu_flags)
        assert host.numerics_class(cpu) == klass
        pair = lower_cap(klass)
        assert pair is not None
        caps, capped = pair
        assert host.numerics_class(cpu, caps) == capped != klass


def _run(recipe: Path, out: Path, caps: dict[str, str]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k not in host.CAPS}
    env.update(caps, PYTHONPATH=str(ROOT / "eval"), HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-m", "evalq.app.cli", "run", str(recipe),
                           "-o", str(out)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads((out / "summary.json").read_text(encoding="utf-8"))


def _variant(summary: dict[str, Any], name: str) -> dict[str, Any]:
    return summary["datasets"]["pydocs"]["variants"][name]


def _cached(summary: dict[str, Any], name: str) -> tuple[int, int]:
    """(texts served from the cache, texts computed), documents and queries together."""
    encode = _variant(summary, name)["encode"]
    return (sum(encode[r]["n_cached"] for r in ("documents", "queries")),
            sum(encode[r]["n_computed"] for r in ("documents", "queries")))


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory) -> dict[str, Any]:
    # The machine as it is, without any cap this session itself runs under: each run
    # below sets its own caps (none for the normal runs).
    klass = host.numerics_class(host.read_cpu(), {})
    pair = lower_cap(klass)
    if pair is None:
        pytest.skip(f"numerics class {klass} has no lower class an engine documents a "
                    "cap for; this test needs an x86-64 host with AVX2 or more")
    caps, capped = pair
    tmp = tmp_path_factory.mktemp("isa-cap")
    recipe = recipes.write(tmp / "recipe.yaml", recipes.recipe(
        "isa-cap", cache=tmp / "cache", queries=20, docs=60,
        candidates=[{"name": INT8, "backend": "openvino",
                     "quantization": {"method": "nncf-int8"}}],
        metrics=["nDCG@10"], reference_metrics=["overlap@10", "cosine"],
        parity={"enabled": False}, resamples=200))
    return {"class": klass, "capped_class": capped, "caps": caps, "cache": tmp / "cache",
            "normal": _run(recipe, tmp / "normal", {}),
            "capped": _run(recipe, tmp / "capped", caps),
            "again": _run(recipe, tmp / "again", {})}


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.process
def test_each_run_records_the_class_its_kernels_ran(three_runs) -> None:
    normal, capped = three_runs["normal"]["host"], three_runs["capped"]["host"]
    assert normal["numerics_class"] == three_runs["class"]
    assert normal["isa_caps"] == {}
    assert capped["numerics_class"] == three_runs["capped_class"] != three_runs["class"]
    assert capped["isa_caps"] == three_runs["caps"]


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.process
def test_the_capped_run_recomputes_int8_and_reuses_fp32(three_runs) -> None:
    texts = 20 + 60
    assert _cached(three_runs["normal"], INT8) == (0, texts)  # a fresh cache
    # Another class: nothing of the first run's int8 vectors is served...
    assert _cached(three_runs["capped"], INT8) == (0, texts)
    # ...while fp32, whose kernels differ only in summation order, stays shared.
    assert _cached(three_runs["capped"], "fp32") == (texts, 0)
    # Back on this machine's class, the first run's int8 vectors are served again: the
    # capped miss came from the class, not from a key that changes every run.
    assert _cached(three_runs["again"], INT8) == (texts, 0)
    # The calibrated graph too: one per class, each from its own NNCF run.
    graphs = sorted((three_runs["cache"] / "checkpoints").glob("graph-nncf-int8-*"))
    assert len(graphs) == 2


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.process
def test_the_two_classes_agree_within_int8_tolerance(three_runs) -> None:
    normal, capped = three_runs["normal"], three_runs["capped"]
    # fp32 came from the cache: the same vectors, so the same numbers to the last digit.
    assert _variant(capped, "fp32")["metrics"] == _variant(normal, "fp32")["metrics"]
    a, b = _variant(normal, INT8), _variant(capped, INT8)
    for side in (a, b):
        assert side["reference_metrics"]["cosine"]["value"] >= MIN_COSINE
    assert a["reference_metrics"]["cosine"]["value"] == pytest.approx(
        b["reference_metrics"]["cosine"]["value"], abs=COSINE_TOLERANCE)
    assert a["reference_metrics"]["overlap@10"]["value"] == pytest.approx(
        b["reference_metrics"]["overlap@10"]["value"], abs=METRIC_TOLERANCE)
    assert a["metrics"]["nDCG@10"]["value"] == pytest.approx(
        b["metrics"]["nDCG@10"]["value"], abs=METRIC_TOLERANCE)
