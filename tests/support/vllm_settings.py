"""The vLLM engine settings every test uses: small memory, because the CI machine's memory
is shared by everything the suite starts."""

VLLM_TEST_MEMORY = {"gpu_memory_utilization": 0.1}


def w8a8_dtype() -> str:
    """The dtype a W8A8 int8 checkpoint runs at in vLLM's CPU build on this host:
    bfloat16 where vLLM takes its AMX int8 kernel (it takes no float32 activations;
    :func:`evalq.engines.devices.check_cpu_int8_dtype`), float32 elsewhere."""
    from evalq.engines.devices import amx_int8_kernel

    return "bfloat16" if amx_int8_kernel() else "float32"
