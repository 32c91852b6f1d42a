"""Capability checks: impossible backend/device/quantization/dtype combinations are refused
before anything loads, with the supported alternatives in the message (exit 2)."""

from __future__ import annotations

import json

import pytest

from evalq.core.errors import InputError
from evalq.engines import devices
from evalq.engines.capability import (
    VLLM_CPU_QUANTIZATION,
    check_capability,
    check_current_device,
    detect_device,
)
from evalq.engines.devices import symmetric_int8_activations

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


# -- vLLM's CPU int8 kernel and the dtype (measured on an x86-64/amx host) ----------------

def _w8a8_folder(tmp_path, symmetric=True, bits=8):
    group = {"weights": {"num_bits": 8, "type": "int", "symmetric": True},
             "input_activations": {"num_bits": bits, "type": "int", "symmetric": symmetric,
                                   "dynamic": True}}
    (tmp_path / "config.json").write_text(json.dumps({"quantization_config": {
        "quant_method": "compressed-tensors", "config_groups": {"group_0": group}}}))
    return tmp_path


def test_a_w8a8_checkpoint_is_read_as_symmetric_int8(tmp_path):
    assert symmetric_int8_activations(_w8a8_folder(tmp_path))
    assert not symmetric_int8_activations(_w8a8_folder(tmp_path, symmetric=False))
    assert not symmetric_int8_activations(_w8a8_folder(tmp_path, bits=16))
    assert not symmetric_int8_activations(tmp_path / "no-such-folder")
    assert not symmetric_int8_activations(None)


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_w8a8_where_vllm_takes_its_amx_kernel_needs_bfloat16(monkeypatch, tmp_path, dtype):
    """Where vLLM picks its AMX int8 kernel, any dtype but bfloat16 dies in the engine:
    refused before it loads, at plan time and at engine start, naming dtype."""
    monkeypatch.setattr(devices, "amx_int8_kernel", lambda: True)
    with pytest.raises(InputError) as err:
        check_capability("vllm", "cpu", None, dtype, symmetric_int8=True)
    assert err.value.field == "dtype" and "bfloat16" in (err.value.fix or "")
    assert "AMX" in err.value.message
    with pytest.raises(InputError) as err:
        devices.check_current_vllm(None, dtype, _w8a8_folder(tmp_path))
    assert err.value.field == "dtype"
    check_capability("vllm", "cpu", None, "bfloat16", symmetric_int8=True)
    check_capability("vllm", "cpu", None, dtype)  # not an int8 checkpoint
    devices.check_current_vllm(None, dtype, _w8a8_folder(tmp_path, symmetric=False))


def test_w8a8_without_the_amx_kernel_takes_float32(monkeypatch, tmp_path):
    monkeypatch.setattr(devices, "amx_int8_kernel", lambda: False)
    check_capability("vllm", "cpu", None, "float32", symmetric_int8=True)
    devices.check_current_vllm(None, "float32", _w8a8_folder(tmp_path))


@pytest.mark.vllm
def test_the_amx_question_is_the_one_vllm_asks():
    """vLLM's own choice for a MiniLM-shaped symmetric int8 layer (1152 × 384) on this
    CPU agrees with evalq's rule, whatever this CPU is."""
    import torch
    from vllm.model_executor.layers.utils import check_cpu_sgl_kernel

    assert devices.amx_int8_kernel() == check_cpu_sgl_kernel(1152, 384, torch.int8)


@pytest.mark.parametrize("amx", [True, False])
def test_the_shipped_w8a8_recipe_on_an_amx_host_is_refused_naming_its_dtype(
        monkeypatch, capsys, amx):
    """``evalq validate --here`` of recipes/vllm-cpu.yaml (its W8A8 candidate at float32):
    exit 2 naming ``candidates.3.dtype`` where vLLM takes its AMX kernel, ok elsewhere."""
    from evalq.app.cli import main
    from evalq.core.locations import resolve_recipe

    monkeypatch.setattr(devices, "amx_int8_kernel", lambda: amx)
    code = main(["validate", "--here", str(resolve_recipe("vllm-cpu"))])
    err = capsys.readouterr().err
    if not amx:
        assert code == 0, err
        return
    assert code == 2
    assert "field 'candidates.3.dtype':" in err and "vllm-w8a8-int8" in err
    assert "set dtype: bfloat16" in err
