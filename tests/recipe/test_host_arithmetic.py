"""The plan's arithmetic line: what each variant computes in on a given host."""

from __future__ import annotations

import dataclasses

import pytest

from evalq.core.host import HostFacts, openvino_default
from evalq.recipe.arithmetic import planned_arithmetic
from evalq.recipe.schema import Variant

AVX2 = HostFacts(cpu_vendor="AuthenticAMD", cpu_model="EPYC", arch="x86-64",
                 flags=("avx2", "fma"), numerics_class="x86-64/avx2")
BF16 = dataclasses.replace(AVX2, flags=("avx2", "fma", "avx512f", "avx512bw", "avx512vl",
                                        "avx512_vnni", "avx512_bf16"),
                           numerics_class="x86-64/avx512-vnni")
ARM = HostFacts(cpu_vendor="0x41", cpu_model=None, arch="arm64",
                flags=("asimd", "asimdhp", "fphp"), numerics_class="arm64/neon")


CAPPED = dataclasses.replace(BF16, isa_caps={"ONEDNN_MAX_CPU_ISA": "AVX2"},
                             numerics_class="x86-64/avx2")
CAPPED_BF16 = dataclasses.replace(BF16, isa_caps={"DNNL_MAX_CPU_ISA": "avx512_core_bf16"})


@pytest.mark.parametrize(("host", "expected"), [(AVX2, "f32"), (BF16, "bf16"),
                                                 (ARM, "f16"), (CAPPED, "f32"),
                                                 (CAPPED_BF16, "bf16")])
def test_openvino_default_precision_follows_the_flags(host: HostFacts, expected: str) -> None:
    assert openvino_default(host) == expected


def test_openvino_is_pinned_unless_the_variant_asks_for_the_default() -> None:
    pinned = Variant(name="ov", backend="openvino")
    assert planned_arithmetic(pinned, "cpu", BF16).startswith("f32 (pinned")
    assert "would run bf16 here" in planned_arithmetic(pinned, "cpu", BF16)
    default = Variant(name="ov", backend="openvino", openvino={"precision": "default"})
    assert planned_arithmetic(default, "cpu", BF16).startswith("bf16 (OpenVINO's default")
    assert planned_arithmetic(default, "cpu", AVX2).startswith("f32 (OpenVINO's default")


def test_int8_names_the_numerics_class_and_fp32_does_not() -> None:
    int8 = Variant(name="q", backend="onnx", quantization={"method": "ort-dynamic-int8"})
    assert planned_arithmetic(int8, "cpu", AVX2) == (
        "int8 kernels (ort-dynamic-int8) of numerics class x86-64/avx2, other operations fp32")
    assert "x86-64/avx512-vnni" in planned_arithmetic(int8, "cpu", BF16)
    assert planned_arithmetic(Variant(name="f", backend="inprocess"), "cpu", BF16) == "fp32"
    remote = Variant(name="r", backend="openai",
                     http={"url": "http://127.0.0.1:1/v1", "model": "m"})
    assert planned_arithmetic(remote, "remote", BF16).startswith("the server's own choice")


def test_an_unknown_precision_is_refused() -> None:
    with pytest.raises(ValueError, match="precision"):
        Variant(name="ov", backend="openvino", openvino={"precision": "bf16"})
