"""Capability checks: impossible backend/device/quantization/dtype combinations are refused
before anything loads, with the supported alternatives in the message (exit 2)."""

from __future__ import annotations

import pytest

from evalq.core.errors import InputError
from evalq.engines.capability import (
    VLLM_CPU_QUANTIZATION,
    check_capability,
    check_current_device,
    detect_device,
)

ADA = (8, 9)
AMPERE = (8, 0)
TURING = (7, 5)
HOPPER = (9, 0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_vllm_on_cpu_serves_plain_dtypes(dtype):
    check_capability("vllm", "cpu", None, dtype)


@pytest.mark.parametrize("quant", ["compressed-tensors", "awq", "gptq"])
def test_vllm_on_cpu_serves_int8_w8a8_awq_gptq(quant):
    check_capability("vllm", "cpu", quant, "float32")
    assert quant in VLLM_CPU_QUANTIZATION


@pytest.mark.parametrize("quant", ["fp8", "bitsandbytes", "awq_marlin", "gptq_marlin"])
def test_vllm_on_cpu_refuses_gpu_only_quantization(quant):
    with pytest.raises(InputError) as err:
        check_capability("vllm", "cpu", quant, "float32")
    text = str(err.value)
    assert err.value.field == "quantization"
    assert "only a CPU" in text and "w8a8-int8" in text and "AWQ" in text


def test_fp8_needs_ada_or_newer():
    check_capability("vllm", "cuda", "fp8", "float16", compute_capability=ADA)
    check_capability("vllm", "cuda", "fp8", "bfloat16", compute_capability=HOPPER)
    with pytest.raises(InputError) as err:
        check_capability("vllm", "cuda", "fp8", "float16", compute_capability=AMPERE)
    text = str(err.value)
    assert "8.9" in text and "8.0" in text
    assert "compressed-tensors" in text and "fp8" not in text.split("Fix:")[1]


def test_bitsandbytes_in_vllm_runs_on_nvidia_gpus():
    check_capability("vllm-engine", "cuda", "bitsandbytes", "float16", compute_capability=TURING)


def test_bfloat16_needs_ampere():
    check_capability("vllm", "cuda", None, "bfloat16", compute_capability=AMPERE)
    with pytest.raises(InputError) as err:
        check_capability("vllm", "cuda", None, "bfloat16", compute_capability=TURING)
    assert err.value.field == "dtype" and "float16" in str(err.value)


def test_unknown_names_list_the_known_ones():
    with pytest.raises(InputError) as err:
        check_capability("vllm", "cpu", "int3-magic", "float32")
    assert "compressed-tensors" in str(err.value) and "fp8" in str(err.value)
    with pytest.raises(InputError) as err:
        check_capability("tensorrt", "cpu", None, "float32")
    assert "vllm" in str(err.value) and "inprocess" in str(err.value)
    with pytest.raises(InputError) as err:
        check_capability("vllm", "cpu", None, "float8")
    assert err.value.field == "dtype"


def test_http_backends_refuse_client_side_quantization():
    check_capability("openai", "cpu", None, "float32")
    with pytest.raises(InputError) as err:
        check_capability("tei", "cuda", "fp8", "float16", compute_capability=HOPPER)
    assert "where that server starts" in str(err.value)


def test_current_device_is_detected_and_checked():
    device = detect_device()
    assert device.kind in ("cpu", "cuda")
    if device.kind == "cpu":
        assert device.compute_capability is None
        with pytest.raises(InputError):
            check_current_device("vllm", "fp8", "float32")
    assert check_current_device("vllm", None, "float32") == device
