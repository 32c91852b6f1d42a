"""Host facts: /proc/cpuinfo read for the flags kernels dispatch on, and the numerics class.

Sample texts stand for the CPUs the issue measured (AVX2-only EPYC, AVX-512 VNNI EPYC) and
an ARM server, so these tests give the same answers on any machine that runs them.
"""

from __future__ import annotations

import pytest

from evalq.core import host

AVX2_ONLY = """processor	: 0
vendor_id	: AuthenticAMD
cpu family	: 23
model name	: AMD EPYC 7R32
flags		: fpu vme de pse tsc msr sse sse2 ssse3 fma cx16 sse4_1 sse4_2 avx f16c avx2 sha_ni

processor	: 1
vendor_id	: AuthenticAMD
model name	: AMD EPYC 7R32
flags		: fpu avx512f avx512bw avx512vl avx512_vnni
"""

AVX512_VNNI = """processor	: 0
vendor_id	: AuthenticAMD
model name	: AMD EPYC 9R14 96-Core Processor
flags		: fpu sse4_2 avx fma f16c avx2 avx512f avx512dq avx512cd avx512bw avx512vl \
avx_vnni avx512_bf16 avx512vbmi avx512_vnni avx512_bitalg
"""

SAPPHIRE_RAPIDS = """processor	: 0
vendor_id	: GenuineIntel
model name	: Intel(R) Xeon(R) Platinum 8488C
flags		: fma avx2 avx512f avx512bw avx512vl avx512_vnni avx512_bf16 avx512_fp16 \
amx_bf16 amx_tile amx_int8 avx_vnni
"""

ALDER_LAKE = """vendor_id	: GenuineIntel
model name	: 12th Gen Intel(R) Core(TM) i7-12700
flags		: fma avx2 avx_vnni f16c
"""

GRAVITON3 = """processor	: 0
BogoMIPS	: 2100.00
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid \
asimdrdm lrcpc dcpop sha3 sm3 sm4 asimddp sha512 sve asimdfhm dit uscat ilrcpc flagm \
ssbs paca pacg dcpodp svei8mm svebf16 i8mm bf16 dgh rng
CPU implementer	: 0x41
CPU part	: 0xd40
"""

GRAVITON2 = """processor	: 0
Features	: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid \
asimdrdm lrcpc dcpop asimddp ssbs
CPU implementer	: 0x41
CPU part	: 0xd0c
"""


@pytest.mark.parametrize(("text", "machine", "expected"), [
    (AVX2_ONLY, "x86_64", "x86-64/avx2"),
    (AVX512_VNNI, "x86_64", "x86-64/avx512-vnni"),
    (SAPPHIRE_RAPIDS, "x86_64", "x86-64/amx"),
    (ALDER_LAKE, "x86_64", "x86-64/avx2-vnni"),
    (GRAVITON3, "aarch64", "arm64/sve"),
    (GRAVITON2, "aarch64", "arm64/neon"),
    ("vendor_id : x\nflags : sse sse2 sse4_2\n", "x86_64", "x86-64/sse"),
    ("", "x86_64", "x86-64/unknown"),
    ("", "arm64", "arm64/neon"),
    ("", "riscv64", "riscv64/generic"),
])
def test_numerics_class_from_cpuinfo(text: str, machine: str, expected: str) -> None:
    assert host.numerics_class(host.parse_cpuinfo(text, machine)) == expected


def test_only_the_first_processor_and_only_kernel_flags_are_read() -> None:
    cpu = host.parse_cpuinfo(AVX2_ONLY, "x86_64")
    assert cpu.vendor == "AuthenticAMD" and cpu.model == "AMD EPYC 7R32"
    # The second block's AVX-512 flags are not this block's; sha_ni decides no kernel.
    assert cpu.flags == ("avx", "avx2", "f16c", "fma", "sse4_2")
    vnni = host.parse_cpuinfo(AVX512_VNNI, "x86_64").flags
    assert {"avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
            "avx_vnni"} <= set(vnni)
    assert "avx512cd" not in vnni


def test_arm_features_are_read_and_the_implementer_is_the_vendor() -> None:
    cpu = host.parse_cpuinfo(GRAVITON3, "aarch64")
    assert cpu.arch == "arm64" and cpu.vendor == "0x41" and cpu.model == "0xd40"
    assert {"asimd", "asimddp", "sve", "i8mm", "bf16", "fphp"} <= set(cpu.flags)
    assert "svebf16" not in cpu.flags and "avx2" not in cpu.flags


@pytest.mark.parametrize(("caps", "expected"), [
    ({"ONEDNN_MAX_CPU_ISA": "AVX2"}, "x86-64/avx2"),
    ({"ONEDNN_MAX_CPU_ISA": "avx512_core"}, "x86-64/avx512"),
    ({"ATEN_CPU_CAPABILITY": "avx2"}, "x86-64/avx2"),
    ({"ONEDNN_MAX_CPU_ISA": "ALL"}, "x86-64/avx512-vnni"),  # no cap
    ({"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX"}, "x86-64/avx512-vnni"),  # never raises
])
def test_a_documented_cap_lowers_the_class(caps: dict[str, str], expected: str) -> None:
    cpu = host.parse_cpuinfo(AVX512_VNNI, "x86_64")
    assert host.numerics_class(cpu, caps) == expected


def test_caps_are_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in host.CAPS:
        monkeypatch.delenv(name, raising=False)
    assert host.isa_caps() == {}
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert host.isa_caps() == {"ONEDNN_MAX_CPU_ISA": "AVX2"}
    assert host.numerics_key()["isa_caps"] == {"ONEDNN_MAX_CPU_ISA": "AVX2"}
    if host.read_cpu().arch == "x86-64" and host.read_cpu().flags:
        assert host.current_class() in ("x86-64/avx2", "x86-64/sse")


def test_host_facts_of_this_machine_are_complete_and_json_ready() -> None:
    facts = host.host_facts().as_dict()
    assert facts["numerics_class"].startswith(facts["arch"] + "/")
    assert facts["cores"] and facts["os"]
    assert isinstance(facts["flags"], list)
    assert "onnxruntime" in facts["engines"] and "torch" in facts["engines"]


def test_engine_choices_ask_only_loaded_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    for name in ("torch", "onnxruntime", "openvino", "faiss"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    assert host.engine_choices() == {}
